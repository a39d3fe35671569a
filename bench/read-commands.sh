#!/bin/sh
# read-commands.sh: the cost of annal's read commands at 10^3 and 10^6
# events (docs/benchmarks.md, "Read commands"). Run from the repository's
# root: sh bench/read-commands.sh [WORKDIR]. Needs /usr/bin/time (GNU) and
# python3; WORKDIR (default a new directory under /tmp) gets ~450 MB.
#
# It builds annal once, makes two closed data directories with a ledger
# "shop" of 10^3 and 10^6 events (annal create + annal append --durability
# none), then times, alternating the two sizes 3 times:
#   - annal get ID (the middle event) and annal scan shop --limit 1 on the
#     closed directories: the first run after the writer closed (no stamps
#     in the reader's cache yet), then the next ones;
#   - annal get ID beside a live writer (annal append, one event every 10 ms)
#     on copies of the two directories: first run (empty cache) and next.
# Each line: what, wall seconds, maximum RSS in KB.
set -e
work=${1:-$(mktemp -d /tmp/annal-reads.XXXXXX)}
mkdir -p "$work"
annal=$work/annal
go build -o "$annal" ./cmd/annal
export XDG_CACHE_HOME=$work/cache
events() { # events N FIRST: N append lines
	python3 -c '
import sys
n, first = int(sys.argv[1]), int(sys.argv[2])
w = sys.stdout.write
for i in range(first, first + n):
    w("{\"entity\":\"order\",\"key\":\"o%d\",\"event\":\"placed\",\"data\":{\"n\":%d}}\n" % (i % 1000, i))
' "$1" "$2"
}
make() { # make DIR N
	"$annal" --dir "$1" create shop >/dev/null
	events "$2" 0 | "$annal" --dir "$1" append shop --durability none >"$1.ids"
}
[ -d "$work/d3" ] || make "$work/d3" 1000
[ -d "$work/d6" ] || make "$work/d6" 1000000
id3=$(sed -n 500p "$work/d3.ids")
id6=$(sed -n 500000p "$work/d6.ids")
t() { # t LABEL ARGS...: time one annal command
	label=$1
	shift
	/usr/bin/time -f "$label %e s %M KB" "$annal" "$@" >/dev/null
}
rm -rf "$XDG_CACHE_HOME"
for round in 1 2 3; do
	t "closed 10^3 get (round $round)" --dir "$work/d3" get "$id3"
	t "closed 10^6 get (round $round)" --dir "$work/d6" get "$id6"
	t "closed 10^3 scan --limit 1 (round $round)" --dir "$work/d3" scan shop --limit 1
	t "closed 10^6 scan --limit 1 (round $round)" --dir "$work/d6" scan shop --limit 1
done
# Beside a live writer, on copies (the writer changes them).
rm -rf "$work/l3" "$work/l6" "$XDG_CACHE_HOME"
cp -r "$work/d3" "$work/l3"
cp -r "$work/d6" "$work/l6"
touch "$work/writing" # the writers stop once it is removed
for d in l3 l6; do
	python3 -c '
import os, sys, time
i = 0
while os.path.exists(sys.argv[1]):
    sys.stdout.write("{\"entity\":\"order\",\"key\":\"live\",\"event\":\"placed\",\"data\":{\"n\":%d}}\n" % i)
    sys.stdout.flush()
    i += 1
    time.sleep(0.01)
' "$work/writing" | "$annal" --dir "$work/$d" append shop --durability none >/dev/null 2>&1 &
done
sleep 2
for round in 1 2 3; do
	t "live 10^3 get (round $round)" --dir "$work/l3" get "$id3"
	t "live 10^6 get (round $round)" --dir "$work/l6" get "$id6"
done
rm "$work/writing"
wait
