#!/bin/sh
# Run a command with no CUDA toolkit visible (root): in a private mount namespace every
# /usr/local/cuda* directory is covered by an empty tmpfs and every nvcc on PATH by /dev/null (not
# executable), as tests/e2e/test_toolkit_build.py hides them. Usage, as root: bench/no_cuda.sh CMD...
[ "$1" = --inside ] || exec unshare -m "$0" --inside "$@"
shift
set -e
for dir in $(readlink -f /usr/local/cuda* | sort -u); do mount -t tmpfs -o size=4k none "$dir"; done
IFS=:
for dir in $PATH; do [ -f "$dir/nvcc" ] && mount --bind /dev/null "$dir/nvcc"; done
unset IFS CUDA_HOME CUDA_PATH
if command -v nvcc >/dev/null && [ -x "$(command -v nvcc)" ]; then echo "an nvcc is still visible" >&2; exit 97; fi
if ls /usr/local/cuda*/bin/nvcc 2>/dev/null; then echo "CUDA visible" >&2; exit 97; fi
exec "$@"
