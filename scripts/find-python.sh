#!/usr/bin/env bash
# Prints the path of a Python 3.12+ interpreter, or explains what to install and fails.
# PATH first, then pyenv's installed versions (on this image python3.12 on PATH is a pyenv shim
# that refuses to run, so every candidate is actually executed, never trusted by name).
set -u
ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; }
for c in python3.14 python3.13 python3.12 python3 python; do
  p=$(command -v "$c" 2>/dev/null) || continue
  if ok "$p"; then echo "$p"; exit 0; fi
done
roots=()
command -v pyenv >/dev/null 2>&1 && roots+=("$(pyenv root)/versions")
roots+=("${PYENV_ROOT:-$HOME/.pyenv}/versions")
for r in "${roots[@]}"; do
  for p in $(ls -d "$r"/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do
    if ok "$p"; then echo "$p"; exit 0; fi
  done
done
echo "error: Python 3.12 or newer is required and none was found on PATH or under pyenv." >&2
echo "Install one (for example 'apt-get install python3.12' or 'pyenv install 3.12') and run make again." >&2
exit 1
