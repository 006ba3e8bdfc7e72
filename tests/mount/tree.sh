# A source tree on the mount, next to the same tree on tmpfs: tar, diff,
# modes and times, git, make, links, a directory moved across
# directories, and all of it again after a remount. Sourced by run.sh
# (needs lib.sh's helpers; tar, gzip, git, make, python3).

echo "== a source tree: tar, diff -r, modes and times, git, make, links, renames, remount"
crate=$(crate_tarball libc)
if [ -z "$crate" ]; then
    fail "tree: no libc .crate in cargo's cache (the release build fetches it)"
    return
fi
echo "  tarball: $crate ($(tar tzf "$crate" | wc -l) files)"
fresh tree 1g
start tree
M=$(mnt tree)
R=$WORK/ref.tmpfs
mkdir -p "$R"
mount -t tmpfs tmpfs "$R"
# the same steps on both trees
both() { "$@" "$R" && "$@" "$M"; }
# alike [--dir-times] SUBDIR: the two trees under SUBDIR have the same
# names, kinds, modes, owners, sizes, times, link counts and targets.
alike() {
    local opt=
    if [ "$1" = --dir-times ]; then opt=$1; shift; fi
    [ -d "$R/$1" ] && [ -d "$M/$1" ] || { echo "  no $1 to compare"; return 1; }
    diff <(cd "$R" && python3 "$HERE/treemeta.py" dump "$1" $opt) \
        <(cd "$M" && python3 "$HERE/treemeta.py" dump "$1" $opt) >"$WORK/tree.diff" \
        || { head -20 "$WORK/tree.diff"; return 1; }
}

# The crate as cargo packed it: one mode and one mtime for every file.
unpack_crate() { mkdir "$1/crate" && tar xzf "$crate" -C "$1/crate" --strip-components=1; }
check "tree: the crate unpacks on both" both unpack_crate
check "tree: diff -r finds the unpacked crates identical" diff -r "$R/crate" "$M/crate"
check "tree: modes, sizes and file mtimes as on tmpfs" alike crate

# The same tree with varied modes, owners, nanosecond times, symbolic
# and hard links, through a pax tar (which keeps nanoseconds).
cp -a "$R/crate" "$WORK/varied"
python3 "$HERE/treemeta.py" vary "$WORK/varied" 11
tar --format=posix -C "$WORK" -cf "$WORK/varied.tar" varied
unpack_varied() { tar --numeric-owner -xf "$WORK/varied.tar" -C "$1"; }
check "tree: a pax tar with links and varied modes unpacks on both" both unpack_varied
check "tree: diff -r finds them identical" diff -r "$R/varied" "$M/varied"
check "tree: modes, owners, times (directories' too), links as on tmpfs" \
    alike --dir-times varied
check "tree: hard links are counted (stat %h)" \
    test "$(stat -c %h "$(find "$M/varied" -name '*.hard' | head -1)")" = 2

# Links by hand.
links() {
    echo linked >"$1/target" && ln "$1/target" "$1/hard" && ln -s target "$1/soft" \
        && [ "$(readlink "$1/soft")" = target ] && [ "$(cat "$1/soft")" = linked ] \
        && [ "$(stat -c %h "$1/target")" = 2 ] && rm "$1/target" \
        && [ "$(stat -c %h "$1/hard")" = 1 ] && ! cat "$1/soft" 2>/dev/null
}
check "tree: ln, ln -s, readlink, link counts, a dangling symlink" both links

# git: two commits, a repack, fsck; the index's stat data stays valid.
g() { git -C "$M/repo" -c user.name=pollfs -c user.email=ci@pollfs -c gc.auto=0 "$@"; }
git_history() {
    g fsck --full --strict && [ "$(g log --oneline | wc -l)" = 2 ] && [ -z "$(g status --porcelain)" ]
}
git_work() {
    cp -a "$R/crate" "$M/repo" && g init -q && g add -A && g commit -q -m one \
        && echo "// two" >>"$M/repo/src/lib.rs" && g mv Cargo.toml Cargo.moved \
        && g commit -q -am two && g gc -q && git_history
}
check "tree: git init, add, two commits, gc, fsck --full, log, a clean status" git_work

# make: a rebuild after touching one source redoes that target only.
make_dir() {
    mkdir "$M/mk" && printf '%s\n' 'all: a.out b.out c.out' '%.out: %.in' \
        '	@echo "build $@"' '	@cat $< $< >$@' >"$M/mk/Makefile" \
        && for s in a b c; do echo "$s" >"$M/mk/$s.in" || return 1; done
}
# made OUTPUT: make prints OUTPUT (its lines joined by spaces).
made() { [ "$(LC_ALL=C make -C "$M/mk" --no-print-directory 2>&1 | tr '\n' ' ')" = "$1" ]; }
UP_TO_DATE="make: Nothing to be done for 'all'. "
check "tree: a Makefile and three sources" make_dir
check "tree: make builds a, b and c" made "build a.out build b.out build c.out "
check "tree: make again builds nothing" made "$UP_TO_DATE"
touch "$M/mk/b.in"
check "tree: after touching b.in, make rebuilds b.out only" made "build b.out "

# A directory moved across directories, with everything under it (the
# directories it left and entered get new mtimes, on both alike).
move_dir() { mkdir "$1/elsewhere" && mv "$1/varied/src/unix" "$1/elsewhere/unix"; }
check "tree: a directory moves across directories on both" both move_dir
same_trees() {
    diff -r "$R/varied" "$M/varied" && diff -r "$R/elsewhere" "$M/elsewhere" \
        && diff -r "$R/crate" "$M/crate"
}
same_metadata() { alike varied && alike --dir-times elsewhere && alike crate; }
check "tree: diff -r after the move" same_trees
check "tree: modes, owners, times and links after the move" same_metadata

check "tree: unmounted cleanly" stop tree
check "tree: fsck is clean" fsck_clean tree
start tree
check "tree: after a remount, diff -r finds the trees identical" same_trees
check "tree: after a remount, modes, owners, times and links are kept" same_metadata
check "tree: after a remount, git fsck --full is clean, the log has both commits, the status is clean" \
    git_history
check "tree: after a remount, make finds everything up to date" made "$UP_TO_DATE"
check "tree: unmounted cleanly again" stop tree
check "tree: fsck is clean again" fsck_clean tree
umount "$R"
