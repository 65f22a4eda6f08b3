#!/bin/sh
# Where a template's render cost goes, per template, as fractions of
# tokenizing (callgrind's inclusive counts over HfTokenizer::encode, one run
# of bench_template; bench/template/README.md): mapping records to messages
# (record_to_chat), the prefix renders of the label rule (Renderer::render in
# chat_labels.cpp: resumed or not; of which restoring resume points and
# running the statements after the main loop), the rest of render_labeled
# (the full render and the label rule's own work), and of render_labeled,
# what the shapes cost of their own (docs/chat_templates.md, "One render per
# shape"): the walks that make the records' keys, and the skeletons learnt
# (their renders included); `text`, the records served from their text
# alone (serve_record_shape: "Shapes read from the text"), and `total`,
# what a record costs before it is tokenized (text + record + labeled).
# usage: bench/template/callgrind_split.sh BUILD_DIR TOKENIZER.json CONVERSATIONS.jsonl TEMPLATE_DIR...
set -eu
build=$1 tokenizer=$2 conversations=$3
shift 3
printf '%-45s %8s %8s %8s %9s %8s %10s %10s %8s %8s %8s\n' template total text record labeled prefixes restore after_loop full_rest walk learn
for dir in "$@"; do
  "$(dirname "$0")/callgrind_annotated.sh" "$build" "$tokenizer" "$conversations" "$dir" |
    awk -v name="$(basename "$dir")" '
      { n = $1; gsub(",", "", n); if (n !~ /^[0-9]+$/ || / => /) next; n = n + 0 }
      /chat_shapes\.cpp:tokfeed::text::render_labeled\[/ && n > r { r = n }
      /chat_messages\.cpp:tokfeed::text::record_to_chat/ && n > c { c = n }
      /chat_shapes\.cpp:tokfeed::text::serve_record_shape\(/ && n > t { t = n }
      /HfTokenizer::encode\(/ && n > e { e = n }
      /Renderer::render\(unsigned long/ && n > p { p = n }
      /tmpl::restore\(/ && n > rs { rs = n }
      /tmpl::run_after_loop\(/ && n > ra { ra = n }
      /Walk::run\(/ && n > w { w = n }
      /Shapes::learn\(/ && n > l { l = n }
      END { printf "%-45s %8.3f %8.3f %8.3f %8.3f %9.3f %8.3f %10.3f %10.3f %8.3f %8.3f\n", name, (t + c + r) / e, t / e, c / e, r / e, p / e, rs / e, ra / e, (r - p) / e, w / e, l / e }'
done
