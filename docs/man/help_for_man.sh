#!/bin/bash
# What help2man reads instead of `$DDPRUN_MAN_PROGRAM --help`: the same text, run under its bare name (CLI11
# prints argv[0] in usage lines, which would otherwise be the build tree's path), with the paragraph
# headings help2man has no name for turned into its "*Section*" form, so that the man page gets an EXIT
# STATUS section while --help keeps a plain "Exit status:" heading.
set -o pipefail
(exec -a "${DDPRUN_MAN_PROGRAM##*/}" "$DDPRUN_MAN_PROGRAM" "$@") | sed 's/^Exit status:$/*Exit status*/'
