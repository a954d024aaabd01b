#!/usr/bin/env bash
# Where does the libstdc++ code inside a device-built FA3 module come from? (the error crash of
# docs/benchmarks.md: a TORCH_CHECK message formatted by std::ostream code found *inside*
# _C.abi3.so). One `device` call (~3 min), from fa-shim's root with .carry/ as for
# bench/speed_device.sh: the compile/link environment, a tailored FA3 set built and kept, the
# module's libstdc++ symbols, the objects that define them, and the link line run again with
# the linker tracing the two symbols of the crash's stack (-Wl,-y).
set -u
OUT=${OUT:-/tmp/out}
ROOT=$PWD
WORK=/tmp/link-work
mkdir -p "$OUT" "$WORK"
if [ -d "$ROOT/.carry/whl" ] && [ ! -d "$WORK/site" ]; then
  python3 -m pip install -q --no-index --no-deps --target "$WORK/site" "$ROOT"/.carry/whl/*.whl
fi
[ -d "$WORK/site" ] && export PYTHONPATH=$WORK/site
{ env | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|LDFLAGS|LDSHARED|CPPFLAGS|LIBRARY_PATH|LD_LIBRARY_PATH)='
  python3 -c "import sysconfig as s; [print(k, '=', s.get_config_var(k)) for k in ('CC', 'CXX', 'LDSHARED', 'LDFLAGS', 'CFLAGS')]"
  g++ -print-file-name=libstdc++.a; g++ -print-file-name=libstdc++.so
} > "$OUT/env.txt" 2>&1
python3 -m pip wheel -v --no-deps --no-build-isolation --no-index -w "$WORK/w" "$ROOT/flash-attn-3" \
  -C fa3-source-dir="$ROOT/.carry/fa3" -C head-dims=128 -C dtypes=bf16 -C forward-only=true \
  -C disable=fp8,split,paged-kv,appendkv,local,softcap,packgqa,varlen,cluster \
  -C compiler-cache=none -C wheel-cache=false -C keep-build-dir=true -C cache-dir="$WORK/cache" \
  > "$OUT/build.log" 2>&1
echo "build: exit $?"
kept=$(grep -o "kept the build directory [^ ]*" "$OUT/build.log" | tail -1 | cut -d' ' -f5)
grep -h -- " -shared" "$WORK"/cache/logs/*.log > "$OUT/link-lines.txt"
so=$(find "$kept" -name "_C*.so" | head -1)
echo "module: $so"
readelf -d "$so" > "$OUT/readelf.txt" 2>&1
{ echo "defined std:: symbols: $(nm -C --defined-only "$so" | grep -c 'std::')"
  nm --defined-only "$so" | grep -E "_M_insertIl|codecvt_utf8_utf16" | head; } > "$OUT/module-std.txt"
for o in $(find "$kept" -name "*.o"); do
  echo "$o: $(nm --defined-only "$o" 2>/dev/null | grep -cE '_M_insertIl|codecvt_utf8_utf16')"
done > "$OUT/objects.txt"
line=$(tail -1 "$OUT/link-lines.txt" | sed "s#/tmp/fa-shim-src-[0-9]*/src#$kept/src#g; s# -o [^ ]*# -o $WORK/relink.so#")
(cd "$kept/src/hopper" 2>/dev/null || cd "$kept/src"; eval "$line -Wl,-y,_ZNSo9_M_insertIlEERSoT_ \
  -Wl,-y,_ZNKSt25__codecvt_utf8_utf16_baseIDiE10do_unshiftER11__mbstate_tPcS3_RS3_ -Wl,--trace") \
  > "$OUT/relink-trace.txt" 2>&1
echo "relink: exit $?"
cat "$OUT/env.txt" "$OUT/module-std.txt" "$OUT/objects.txt"; grep -v "^/usr/lib/x86_64-linux-gnu/lib[cm]" "$OUT/relink-trace.txt" | tail -40
