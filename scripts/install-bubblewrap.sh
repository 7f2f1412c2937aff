#!/usr/bin/env bash
# For `make run`: bubblewrap runs the sandboxed stdio servers (SPEC 26). Installed here where
# that is allowed (as root, with apt-get); else one line says how, and the console runs anyway:
# its unsandboxed servers are unaffected, its sandboxed ones show "sandbox unavailable".
command -v bwrap >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing bubblewrap (for sandboxed servers)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; }; then
    exit 0
  fi
fi
echo "note: sandboxed servers need bubblewrap, which is not installed: sudo apt-get install bubblewrap" >&2
exit 0
