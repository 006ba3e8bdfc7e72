#!/usr/bin/env bash
# Fetches a Debian source package's TARBALL (bookworm) into WORKDIR through
# a private apt list, so the system's apt configuration is not touched, and
# unpacks it there (only the MEMBERs, when given); prints the absolute path
# of the unpacked tree (WORKDIR/NAME-VERSION for NAME_VERSION.orig.tar.*).
# Each step is skipped when its result is already there, so a tree that
# was built in is reused as it is.
#   capi/scripts/debian-source.sh WORKDIR PACKAGE[=VERSION] TARBALL [MEMBER...]
set -euo pipefail
mkdir -p "$1"
work=$(cd "$1" && pwd)
package=$2
file=$3
shift 3
name=${file%%.orig.tar.*}
tree=$work/${name/_/-}
if [ ! -f "$work/$file" ]; then
    mkdir -p "$work/apt/lists/partial"
    echo 'deb-src http://deb.debian.org/debian bookworm main' > "$work/apt/src.list"
    apt_opts=(-o "Dir::Etc::SourceList=$work/apt/src.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/apt/lists")
    apt-get "${apt_opts[@]}" update -qq >&2
    (cd "$work" && apt-get "${apt_opts[@]}" source --download-only "$package" >/dev/null)
    [ -f "$work/$file" ] || { echo "debian-source: $package gave no $file" >&2; exit 1; }
fi
unpacked=1
[ -d "$tree" ] || unpacked=0
for member in "$@"; do
    [ -e "$work/$member" ] || unpacked=0
done
if [ $unpacked = 0 ]; then
    tar -C "$work" -xf "$work/$file" "$@"
    [ -d "$tree" ] || { echo "debian-source: $file did not unpack to $tree" >&2; exit 1; }
fi
echo "$tree"
