#!/bin/sh
# Instructions spent mapping and rendering (with the label rule) against
# tokenizing, per template: callgrind's inclusive counts of record_to_chat +
# render_labeled and of HfTokenizer::encode, over the same conversations, in
# one run of bench_template (bench/template/README.md).
# usage: bench/template/callgrind_ratio.sh BUILD_DIR TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR...
set -eu
build=$1 tokenizer=$2 conversations=$3
shift 3
out=$(mktemp)
trap 'rm -f "$out" "$out.n"' EXIT
printf '%-45s %14s %12s %14s %8s\n' template render_labeled record_to_chat encode ratio
for dir in "$@"; do
  valgrind --tool=callgrind --callgrind-out-file="$out" "$build/bench/template/bench_template" \
    "$tokenizer" "$conversations" "$dir" --rounds 1 >/dev/null 2>&1
  # Objects compiled in other directories (a shared compiler cache) name
  # their sources by other paths: cut them to the repository's, so that a
  # function's entries merge.
  sed -E 's#^((fl|fi|fe|cfl|cfi)=\([0-9]+\)) .*/(daemon|bench|tools)/#\1 \3/#' "$out" >"$out.n"
  callgrind_annotate --inclusive=yes --threshold=100 "$out.n" 2>/dev/null |
    awk -v name="$(basename "$dir")" '
      { n = $1; gsub(",", "", n); if (n !~ /^[0-9]+$/) next; n = n + 0 }
      /render_labeled/ && n > r { r = n }
      /record_to_chat/ && n > c { c = n }
      /HfTokenizer::encode\(/ && n > e { e = n }
      END { printf "%-45s %14d %12d %14d %8.3f\n", name, r, c, e, (r + c) / e }'
done
