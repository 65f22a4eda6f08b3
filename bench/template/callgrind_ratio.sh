#!/bin/sh
# Instructions spent mapping and rendering (with the label rule) against
# tokenizing, per template: callgrind's inclusive counts of record_to_chat +
# render_labeled and of HfTokenizer::encode, over the same conversations, in
# one run of bench_template (bench/template/README.md).
# usage: bench/template/callgrind_ratio.sh BUILD_DIR TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR...
set -eu
build=$1 tokenizer=$2 conversations=$3
shift 3
printf '%-45s %14s %12s %14s %8s\n' template render_labeled record_to_chat encode ratio
for dir in "$@"; do
  "$(dirname "$0")/callgrind_annotated.sh" "$build" "$tokenizer" "$conversations" "$dir" |
    awk -v name="$(basename "$dir")" '
      { n = $1; gsub(",", "", n); if (n !~ /^[0-9]+$/) next; n = n + 0 }
      /render_labeled/ && n > r { r = n }
      /record_to_chat/ && n > c { c = n }
      /HfTokenizer::encode\(/ && n > e { e = n }
      END { printf "%-45s %14d %12d %14d %8.3f\n", name, r, c, e, (r + c) / e }'
done
