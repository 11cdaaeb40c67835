# extension_sources_hash REPO: sha256 of the files the Cython extensions are built from
# (setup.py, pyx/, the core headers). scripts/prebuild_device.sh stores it beside its
# prebuilt extensions and device_lib.sh carries those only when it still matches: an
# extension built from older sources would import fine and run the old code.
extension_sources_hash() {
  (
    cd "$1" || exit 1
    shopt -s nullglob
    for f in setup.py pyx/*.pyx pyx/*.pxd pyx/*.h cuda/*.h cuda/*.inc; do
      printf '%s\n' "$f"
      cat "$f"
    done | sha256sum | cut -d' ' -f1
  )
}
