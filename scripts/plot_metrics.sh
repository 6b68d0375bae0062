#!/bin/sh
# plot_metrics.sh - draws the loss and accuracy curves of a ddp-train run
# from its JSON-lines metrics file (--metrics PATH) into a PNG, with gnuplot.
#
#   scripts/plot_metrics.sh metrics.jsonl [curves.png]
#
# Left: training loss (per logged interval) and held-out loss (per
# evaluation) against the step; right: training and held-out accuracy.
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
	echo "usage: $0 METRICS.jsonl [OUT.png]" >&2
	exit 2
fi
in=$1
out=${2:-${in%.jsonl}.png}
if [ ! -r "$in" ]; then
	echo "plot_metrics: cannot read '$in' (pass the file given to ddp-train --metrics)" >&2
	exit 1
fi
if ! command -v gnuplot >/dev/null 2>&1; then
	echo "plot_metrics: gnuplot is missing (apt-get install gnuplot-nox)" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One "step loss accuracy" line per record of a kind. The records are written
# by metrics.c with fixed key names, one object per line.
field() { sed -n "s/.*\"$1\": \\([-0-9.eE+]*\\).*/\\1/p"; }
extract() {
	grep "\"kind\": \"$1\"" "$in" >"$tmp/$1.json" || true
	field step <"$tmp/$1.json" >"$tmp/s"
	field loss <"$tmp/$1.json" >"$tmp/l"
	field accuracy <"$tmp/$1.json" >"$tmp/a"
	paste -d ' ' "$tmp/s" "$tmp/l" "$tmp/a" >"$tmp/$1.dat"
}
extract train
extract eval
if [ ! -s "$tmp/train.dat" ] && [ ! -s "$tmp/eval.dat" ]; then
	echo "plot_metrics: '$in' has no train or eval records" >&2
	exit 1
fi

plot() { # file column title
	if [ -s "$1" ]; then printf "'%s' using 1:%s with linespoints title '%s'" "$1" "$2" "$3"; fi
}
sep() { if [ -s "$tmp/train.dat" ] && [ -s "$tmp/eval.dat" ]; then printf ', '; fi; }

gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output '$out'
set multiplot layout 1,2 title 'ddp-train: $in'
set xlabel 'step'
set grid
set ylabel 'loss'
set logscale y
plot $(plot "$tmp/train.dat" 2 'train loss')$(sep)$(plot "$tmp/eval.dat" 2 'held-out loss')
unset logscale y
set ylabel 'accuracy'
set yrange [0:1]
set key bottom right
plot $(plot "$tmp/train.dat" 3 'train accuracy')$(sep)$(plot "$tmp/eval.dat" 3 'held-out accuracy')
unset multiplot
GP
echo "plot_metrics: wrote $out"
