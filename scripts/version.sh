#!/bin/sh
# version.sh version|commit|date: what the Makefile gives the binary with -X
# (main.version, main.commit, main.date), computed from the tree it sits in.
#
# version is a semantic version (Semantic Versioning 2.0.0), without the
# tag's v:
#   at a release tag v0.1.0                    0.1.0
#   3 commits past it                          0.1.0+3.g65c9c78a0984
#   in git, no release tag reachable           0.1.0+g65c9c78a0984 (VERSION's release)
#   not a git work tree (a source archive)     0.1.0 (VERSION's, else CHANGELOG.md's latest release)
# and .dirty after the + (+dirty at a tag) while tracked files have
# uncommitted changes, as git describe --dirty and make bench judge a tree
# (benchreport marks such a run as not a commit's).
#
# What follows a release is told as build metadata, not as a pre-release:
# a pre-release (0.1.0-dev) sorts before the release, and these builds hold
# the release and the commits after it; build metadata claims no order
# beyond the release's, and names the commit (12 hex digits, as Go's
# pseudo-versions do). The next release's number is not guessed: it is
# chosen when its entry is written in CHANGELOG.md. (An image tag cannot
# hold the +: make image writes it _.)
#
# commit is HEAD's full hash, empty outside git. date is the build's time,
# UTC, RFC 3339, or SOURCE_DATE_EPOCH's when it is set (seconds since the
# epoch, as the reproducible-builds specification of that variable says).
set -eu
cd "$(dirname "$0")/.."

# The tree is git's only where it is the top of a work tree: a source
# archive unpacked inside another repository is not that repository's commit.
in_git() {
	top=$(git rev-parse --show-toplevel 2>/dev/null) && [ "$top" = "$(pwd -P)" ]
}

dirty() {
	[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]
}

# release is the latest release that the tree names: VERSION's, else the
# first release heading of CHANGELOG.md ("## [0.1.0] - 2026-11-27").
release() {
	if [ -f VERSION ]; then
		v=$(cat VERSION)
	else
		v=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md 2>/dev/null | head -n 1)
	fi
	printf '%s' "$v" | tr -d ' \t\r\n'
}

case ${1:-} in
version)
	if ! in_git; then
		echo "$(release)"
		exit 0
	fi
	short=g$(git rev-parse --short=12 HEAD)
	meta=
	if tag=$(git describe --tags --match 'v[0-9]*' --abbrev=0 2>/dev/null); then
		base=${tag#v}
		n=$(git rev-list --count "$tag..HEAD")
		[ "$n" -eq 0 ] || meta=$n.$short
	else
		base=$(release)
		meta=$short
	fi
	if dirty; then
		meta=${meta:+$meta.}dirty
	fi
	echo "$base${meta:++$meta}"
	;;
commit)
	if in_git; then
		git rev-parse HEAD
	else
		echo
	fi
	;;
date)
	if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
		# GNU date, then BSD's.
		date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null ||
			date -u -r "$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ
	else
		date -u +%Y-%m-%dT%H:%M:%SZ
	fi
	;;
*)
	echo "usage: $0 version|commit|date" >&2
	exit 2
	;;
esac
