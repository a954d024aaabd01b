#!/bin/sh
# Run a command with no CUDA toolkit visible (root): in a private mount namespace every
# /usr/local/cuda* directory is covered by an empty one and every nvcc on PATH by an empty file,
# as tests/e2e/test_toolkit_build.py does. Usage: sudo-less root: bench/no_cuda.sh CMD ARGS...
[ "$1" = --inside ] || exec unshare -m "$0" --inside "$@"
shift
set -e
empty=$(mktemp -d) && file=$(mktemp)
for dir in $(readlink -f /usr/local/cuda* | sort -u); do mount --bind "$empty" "$dir"; done
IFS=:
for dir in $PATH; do [ -f "$dir/nvcc" ] && mount --bind "$file" "$dir/nvcc"; done
unset IFS CUDA_HOME CUDA_PATH
if command -v nvcc >/dev/null && [ -x "$(command -v nvcc)" ]; then echo "an nvcc is still visible" >&2; exit 97; fi
if ls /usr/local/cuda*/bin/nvcc 2>/dev/null; then echo "CUDA visible" >&2; exit 97; fi
exec "$@"
