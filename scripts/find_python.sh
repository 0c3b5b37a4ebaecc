#!/bin/sh
# Print the path of a Python >= 3.12 interpreter (PySide6 on 3.11 leaks None refs).
for cand in python3.13 python3.12 "$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python" python3; do
    p=$(command -v "$cand" 2>/dev/null) || continue
    if "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
        echo "$p"; exit 0
    fi
done
for p in "$(pyenv root 2>/dev/null)"/versions/3.1[2-9]*/bin/python3 /usr/bin/python3.1[2-9]; do
    if [ -x "$p" ]; then echo "$p"; exit 0; fi
done
echo "No Python >= 3.12 found; install one (e.g. pyenv install 3.12)" >&2
exit 1
