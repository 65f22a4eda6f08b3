#!/bin/sh
# One run of bench_template under callgrind for one template, printed as
# callgrind_annotate's inclusive counts; shared by callgrind_ratio.sh and
# callgrind_split.sh.
# usage: bench/template/callgrind_annotated.sh BUILD_DIR TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR
# (BENCH_TEMPLATE_ARGS: more arguments for bench_template, e.g. --direct)
set -eu
build=$1 tokenizer=$2 conversations=$3 dir=$4
out=$(mktemp)
trap 'rm -f "$out" "$out.n"' EXIT
valgrind --tool=callgrind --callgrind-out-file="$out" "$build/bench/template/bench_template" \
  "$tokenizer" "$conversations" "$dir" --rounds 1 ${BENCH_TEMPLATE_ARGS:-} >/dev/null 2>&1
# Objects compiled in other directories (a shared compiler cache) name their
# sources by other paths: cut them to the repository's, so that a
# function's entries merge.
sed -E 's#^((fl|fi|fe|cfl|cfi)=\([0-9]+\)) .*/(daemon|bench|tools)/#\1 \3/#' "$out" >"$out.n"
callgrind_annotate --inclusive=yes --threshold=100 "$out.n" 2>/dev/null
