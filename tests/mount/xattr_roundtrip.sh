# Extended attributes and POSIX ACLs through the tools people use: a tree
# with user.* and trusted.* attributes, access ACLs with named entries and
# a directory with a default ACL, copied with `cp -a`, archived and
# extracted with `tar --xattrs --acls`, dumped and restored with
# `getfacl`/`setfacl --restore` and `getfattr`/`setfattr --restore`, each
# on the mount and on tmpfs, and every result compared (names, modes,
# owners, every attribute's bytes, getfacl's text); then again after a
# remount. Sourced by run.sh (needs lib.sh's helpers; acl, attr, tar,
# python3).

echo "== xattrs and ACLs round-trip: cp -a, tar --xattrs --acls, getfacl/setfacl, getfattr/setfattr"
for tool in setfacl getfacl setfattr getfattr; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail "round trip: $tool is not installed (Debian's acl and attr packages)"
done
fresh xattr 256m
start xattr
X=$(mnt xattr)
XT=$WORK/xattr.tmpfs
mkdir -p "$XT"
mount -t tmpfs tmpfs "$XT"
xtar() { tar --xattrs --xattrs-include='*' --acls --numeric-owner "$@"; }

# attr_dump DIR: every entry under DIR, sorted, with its kind, mode,
# owner and every extended attribute's name and bytes, then getfacl's
# text for each entry that is not a symbolic link.
attr_dump() {
    python3 - "$1" <<'PY'
import os, stat, sys
top = sys.argv[1]
out = []
for root, dirs, files in os.walk(top):
    for name in sorted(dirs + files):
        p = os.path.join(root, name)
        st = os.lstat(p)
        attrs = sorted(
            (n, os.getxattr(p, n, follow_symlinks=False).hex())
            for n in os.listxattr(p, follow_symlinks=False)
        )
        out.append((os.path.relpath(p, top), stat.S_IFMT(st.st_mode), oct(stat.S_IMODE(st.st_mode)),
                    st.st_uid, st.st_gid, attrs))
for entry in sorted(out):
    print(entry)
PY
    (cd "$1" && find . ! -type l | LC_ALL=C sort | xargs -d '\n' getfacl -n -p 2>&1)
}

# same WHAT A B: the dumps of A and B agree (the difference printed if not).
same() {
    local what=$1
    attr_dump "$2" >"$WORK/dump.a"
    attr_dump "$3" >"$WORK/dump.b"
    if cmp -s "$WORK/dump.a" "$WORK/dump.b"; then
        ok "$what"
    else
        fail "$what"
        diff "$WORK/dump.a" "$WORK/dump.b" | head -20
    fi
}

# make_tree DIR: the source tree, made with the tools.
make_tree() (
    set -e
    cd "$1"
    mkdir -p src/shared src/plain
    echo data >src/file
    setfattr -n user.colour -v blue src/file
    setfattr -n user.bin -v 0x00ff00 src/file
    setfattr -n trusted.origin -v "$(head -c 300 /dev/zero | tr '\0' x)" src/file
    setfacl -m u:65534:rw,g:65534:r src/file
    setfacl -m u:65534:rwx,m::rx src/shared
    setfacl -d -m u::rwx,u:65534:rwx,g::rx,o::- src/shared
    (umask 077 && echo inherited >src/shared/f && mkdir src/shared/sub && echo deeper >src/shared/sub/g)
    echo plain >src/plain/f
    chmod 640 src/plain/f
    setfattr -n user.empty src/plain
    ln -s file src/link
    mkfifo src/fifo
    setfacl -m g:65534:r src/fifo
)

check "round trip: the source tree is made the same on the mount and on tmpfs" \
    bash -c "$(declare -f make_tree); make_tree '$X' && make_tree '$XT'"
same "round trip: made with setfattr/setfacl (and a default ACL inherited)" "$X/src" "$XT/src"

check "round trip: cp -a on the mount and on tmpfs" \
    bash -c "cp -a '$X/src' '$X/cp' && cp -a '$XT/src' '$XT/cp'"
same "round trip: cp -a keeps every attribute and ACL" "$X/cp" "$XT/cp"
same "round trip: cp -a copies what it was given" "$X/cp" "$X/src"

mkdir "$X/tarx" "$XT/tarx" "$X/tarx2"
check "round trip: tar --xattrs --acls made on the mount" xtar -cf "$WORK/m.tar" -C "$X/src" .
check "round trip: ... extracted on tmpfs" xtar -xpf "$WORK/m.tar" -C "$XT/tarx"
check "round trip: ... extracted on the mount" xtar -xpf "$WORK/m.tar" -C "$X/tarx"
same "round trip: tar's copy on the mount is the source" "$X/tarx" "$XT/src"
same "round trip: tar's copy on tmpfs is the source" "$XT/tarx" "$XT/src"
check "round trip: tar made on tmpfs, extracted on the mount" \
    bash -c "tar --xattrs --xattrs-include='*' --acls -cf '$WORK/t.tar' -C '$XT/src' . &&
             tar --xattrs --xattrs-include='*' --acls -xpf '$WORK/t.tar' -C '$X/tarx2'"
same "round trip: that copy is the source too" "$X/tarx2" "$XT/src"

# getfacl dumps, the ACLs cleared, then restored; getfattr the same.
restore() (
    set -e
    cd "$1"
    cp -r src acls
    cp -r src attrs
    (cd src && getfacl -R -p -n . >../acls.txt)
    (cd src && getfattr -R -h -d -m - -e hex . >../attrs.txt)
    setfacl -R -b acls
    setfacl -R -k acls
    (cd acls && setfacl --restore=../acls.txt)
    (cd attrs && setfattr -h --restore=../attrs.txt)
)
check "round trip: getfacl/setfacl --restore and getfattr/setfattr --restore on both" \
    bash -c "$(declare -f restore); restore '$X' && restore '$XT'"
same "round trip: setfacl --restore gives the ACLs back as on tmpfs" "$X/acls" "$XT/acls"
same "round trip: setfattr --restore gives every attribute back as on tmpfs" "$X/attrs" "$XT/attrs"

attr_dump "$X" >"$WORK/before-remount"
check "round trip: unmounted cleanly" stop xattr
check "round trip: fsck is clean" fsck_clean xattr
start xattr
attr_dump "$X" >"$WORK/after-remount"
check "round trip: every attribute and ACL is the same after a remount" \
    cmp -s "$WORK/before-remount" "$WORK/after-remount"
umount "$XT"
check "round trip: unmounted cleanly at the end" stop xattr
