"""bubblewrap's command line for a sandboxed server (SPEC 26), without a console: the walls
26 lists and nothing else, as this machine's file system has them."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from mcpcore.schemas import InputError, Sandbox, sandbox_of, server_config
from mcpcore.supervisor.sandbox import HOME, SandboxError, bwrap_command, sandbox_env, system_binds, tree

PATH = os.environ["PATH"]


def _binds(argv: list[str]) -> dict[str, str]:
    """Mounted path -> the option that mounted it (each source is mounted at its own path)."""
    found = {}
    for i, word in enumerate(argv):
        if word in ("--ro-bind", "--bind", "--symlink", "--tmpfs"):
            found[argv[i + 2] if word != "--tmpfs" else argv[i + 1]] = word
    return found


@pytest.fixture
def venv(tmp_path):
    """A virtualenv whose python links to an interpreter installed elsewhere (as pyenv's do),
    with a console script whose `#!` line names that python."""
    prefix = tmp_path / "pyenv/versions/3.13.0"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    interpreter = prefix / "bin/python3.13"
    interpreter.write_text("")
    env = tmp_path / "srv-venv"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text(f"home = {prefix / 'bin'}\n")
    (env / "bin/python").symlink_to(interpreter)
    script = env / "bin/mcp-server-x"
    script.write_text(f"#!{env / 'bin/python'}\nimport x\n")
    script.chmod(0o755)
    return env, prefix, script


def test_it_walls_in_everything_and_keeps_what_spec_26_lists(venv):
    env, prefix, script = venv
    argv = bwrap_command("bwrap", str(script), ["--flag"], path=PATH)
    assert argv[:4] == ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
    assert "--share-net" not in argv
    binds = _binds(argv)
    for system in ("/usr", "/etc"):
        assert binds[system] == "--ro-bind"
    assert binds["/tmp"] == binds[HOME] == "--tmpfs"
    # The command's tree (the venv) and the interpreter its python links to, read-only.
    assert binds[str(env)] == "--ro-bind" and binds[str(prefix)] == "--ro-bind"
    assert "--bind" not in binds.values()
    assert not any(p == "/" or p.startswith(("/root/.config", "/home/")) for p in binds if p != HOME)
    # The root is remounted read-only after every mount point is made, then the command runs.
    end = argv.index("--")
    assert argv[end - 4 : end] == ["--remount-ro", "/", "--chdir", HOME]
    assert argv[end + 1 :] == [str(script), "--flag"]
    assert max(i for i, w in enumerate(argv) if w in ("--ro-bind", "--bind")) < end - 4


def test_it_copes_with_the_machines_own_system_folders():
    argv = system_binds()
    for p in ("/usr", "/bin", "/sbin", "/etc", "/lib", "/lib64", "/lib32"):
        if os.path.islink(p):
            i = argv.index(p)
            assert argv[i - 2 : i] == ["--symlink", os.readlink(p)]
        elif os.path.isdir(p):
            assert ["--ro-bind", p, p] == argv[argv.index(p) - 1 : argv.index(p) + 2]
        else:
            assert p not in argv


def test_it_opens_the_network_read_and_write_only_as_given(tmp_path):
    outer, inner, extra = tmp_path / "project", tmp_path / "project/out", tmp_path / "data"
    inner.mkdir(parents=True)
    extra.mkdir()
    argv = bwrap_command(
        "bwrap", "true", [], read=[str(outer), str(extra)], write=[str(inner)], network=True, path=PATH
    )
    assert "--share-net" in argv and "--unshare-all" in argv
    binds = _binds(argv)
    assert binds[str(outer)] == binds[str(extra)] == "--ro-bind" and binds[str(inner)] == "--bind"
    # The folder written inside the one read is mounted after it, so it stays writable.
    assert argv.index(str(inner)) > argv.index(str(outer))
    with pytest.raises(SandboxError, match=f"write path {tmp_path}/gone does not exist"):
        bwrap_command("bwrap", "true", [], write=[str(tmp_path / "gone")], path=PATH)
    with pytest.raises(FileNotFoundError):
        bwrap_command("bwrap", "no-such-command-here", [], path=PATH)


def test_it_hides_the_consoles_folders_and_keeps_the_private_home_under_a_wider_read(tmp_path):
    data, elsewhere = tmp_path / "data", tmp_path.parent / "not-under-a-bind"
    data.mkdir()
    argv = bwrap_command(
        "bwrap", "true", ["/home"], read=[str(tmp_path)], path=PATH, hidden=[str(data), str(elsewhere)]
    )
    mounts = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i] in ("--tmpfs", "--ro-bind")]
    # The private home is mounted after a readable /home (an argument here), or it is hidden.
    assert mounts.index(("--tmpfs", HOME)) > mounts.index(("--ro-bind", "/home"))
    # A hidden folder inside a readable tree is an empty tmpfs over it, after the binds.
    assert mounts.index(("--tmpfs", str(data))) > mounts.index(("--ro-bind", str(tmp_path)))
    assert ("--tmpfs", str(elsewhere)) not in mounts  # nothing shows it: nothing to hide


def test_it_reads_an_argument_path_and_a_node_package_whole(tmp_path):
    package = tmp_path / "app/node_modules/@scope/server/dist"
    package.mkdir(parents=True)
    (package / "index.js").write_text("")
    config = tmp_path / "config.json"
    config.write_text("{}")
    argv = bwrap_command(
        "bwrap", "true", [str(package / "index.js"), str(config), "/no/such/path", "x"], path=PATH
    )
    binds = _binds(argv)
    assert binds[str(tmp_path / "app/node_modules")] == "--ro-bind"
    assert binds[str(config)] == "--ro-bind"  # the file, not its folder
    assert str(tmp_path) not in binds and "/no/such/path" not in binds


def test_it_takes_a_bin_folders_parent_only_when_it_is_a_package(tmp_path):
    (tmp_path / "alice/bin").mkdir(parents=True)
    assert tree(str(tmp_path / "alice/bin/tool")) == str(tmp_path / "alice/bin")  # a home, not a package
    (tmp_path / "opt/bin").mkdir(parents=True)
    (tmp_path / "opt/lib").mkdir()
    assert tree(str(tmp_path / "opt/bin/tool")) == str(tmp_path / "opt")
    assert tree("/bin/sh") == "/bin"  # never the whole root
    assert tree("/x/node_modules/.bin/srv") == "/x/node_modules"


def test_it_gives_the_server_its_environment_with_the_private_home():
    env = sandbox_env({"PATH": "/usr/bin", "HOME": "/root", "TMPDIR": "/var/tmp/x", "TOKEN": "t"})
    assert env == {"PATH": "/usr/bin", "HOME": HOME, "TMPDIR": "/tmp", "TOKEN": "t"}


def test_it_reads_the_sandbox_key_and_agenvoy_sandbox_all():
    assert sandbox_of(None, False) is None and sandbox_of(False, True) is None
    assert sandbox_of(None, True) == Sandbox() == sandbox_of(True, False)
    assert sandbox_of({"read": ["/a"], "write": ["/b"], "network": True}, False) == Sandbox(
        ("/a",), ("/b",), True
    )
    assert sandbox_of("yes", False).problem == (
        "server.sandbox must be true, false or an object of read, write and network"
    )
    assert (
        sandbox_of({"read": ["relative"]}, False).problem
        == "server.sandbox.read must be a list of absolute paths"
    )
    cases = {
        '"yes"': "server.sandbox must be true, false or an object of read, write and network",
        "null": "server.sandbox must be true, false or an object of read, write and network",
        '{"write": "/b"}': "server.sandbox.write must be a list of absolute paths",
        '{"network": 1}': "server.sandbox.network must be true or false",
    }
    for value, message in cases.items():
        with pytest.raises(InputError) as info:
            server_config({"command": "x", "sandbox": json.loads(value)})
        assert info.value.message == message
    with pytest.raises(InputError) as info:
        server_config({"url": "https://example.com/mcp", "sandbox": True})
    assert info.value.message == "server.sandbox applies to stdio servers only"
    assert server_config({"url": "https://example.com/mcp", "sandbox": False})["sandbox"] is False
    assert server_config({"command": "x", "sandbox": {"read": ["/a"]}})["sandbox"] == {"read": ["/a"]}


def test_it_runs_a_command_under_the_real_bwrap(tmp_path):
    """The argv works with this machine's bubblewrap: the system is there, the rest is not."""
    secret = Path.home() / ".agenvoy-sandbox-unit"
    secret.write_text("x")
    try:
        argv = bwrap_command(
            "bwrap", "sh", ["-c", f"ls /usr/bin/sh && ! cat {secret} && ! touch /usr/x"], path=PATH
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    finally:
        secret.unlink()
