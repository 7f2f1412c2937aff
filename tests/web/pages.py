"""What the pages' tests share: a tiny PNG as a data URL, and the lines of allow_tool."""

PNG_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDw"
    "ADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def allow_lines(home) -> list[str]:
    path = home / "allow_tool"
    return path.read_text().splitlines() if path.exists() else []
