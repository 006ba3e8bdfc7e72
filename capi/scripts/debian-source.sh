#!/usr/bin/env bash
# Downloads a Debian source package's files (bookworm) into WORKDIR through
# a private apt list, so the system's apt configuration is not touched.
# Does nothing if FILE (the tarball the caller needs) is already there.
#   capi/scripts/debian-source.sh WORKDIR PACKAGE[=VERSION] FILE
set -euo pipefail
work=$1
package=$2
file=$3
[ -f "$work/$file" ] && exit 0
mkdir -p "$work/apt/lists/partial"
echo 'deb-src http://deb.debian.org/debian bookworm main' > "$work/apt/src.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/src.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/apt/lists")
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only "$package" >/dev/null)
[ -f "$work/$file" ] || { echo "debian-source: $package gave no $file" >&2; exit 1; }
