#!/bin/sh
# runtime-packages.sh BINARY...
#
# Prints, one per line, the Debian/Ubuntu packages that own the shared libraries the binaries load. The
# images' build stages run it so that their runtime stages install exactly those packages, whatever the
# distribution names them (Ubuntu 24.04 renamed many, e.g. libgrpc++1.51 -> libgrpc++1.51t64). Fails when a
# library is missing or belongs to no package, rather than letting an image ship without it.
set -eu

if [ "$#" -eq 0 ]; then
  echo "usage: runtime-packages.sh BINARY..." >&2
  exit 2
fi

missing=$(ldd "$@" | grep 'not found' || true)
if [ -n "$missing" ]; then
  echo "runtime-packages: unresolved libraries:" >&2
  echo "$missing" >&2
  exit 1
fi

# "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)": the third field is the file loaded.
libs=$(ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u)

# With a merged /usr, ldd may report /lib/... for a file dpkg registered as /usr/lib/... or the reverse, and
# the name may be a symlink to the versioned file: ask dpkg about every spelling at once (one database read).
candidates() {
  real=$(readlink -f "$1")
  printf '%s\n' "$1" "$real" "/usr$1" "/usr$real" "${1#/usr}" "${real#/usr}"
}
owners=$(for lib in $libs; do candidates "$lib"; done | sort -u | xargs dpkg-query -S 2>/dev/null || true)

packages=""
for lib in $libs; do
  pkg=""
  for path in $(candidates "$lib"); do
    # "libgrpc++1.51:amd64: /usr/lib/..." -> libgrpc++1.51:amd64 (keeping the architecture qualifier).
    pkg=$(printf '%s\n' "$owners" | awk -v p="$path" 'index($0, ": " p) && substr($0, length($0) - length(p) + 1) == p \
          { sub(/: .*/, ""); sub(/, .*/, ""); print; exit }')
    [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "runtime-packages: $lib belongs to no package" >&2
    exit 1
  fi
  packages="$packages$pkg
"
done
printf '%s' "$packages" | sort -u
