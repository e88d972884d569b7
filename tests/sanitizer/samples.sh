#!/usr/bin/env bash
# Every sample under compute-sanitizer memcheck and initcheck: each must end with
# "ERROR SUMMARY: 0 errors" and exit 0. $1: the directory the samples were built in. Exit 77
# (skipped) without compute-sanitizer or a device.
set -u
dir=$1
cs=$(command -v compute-sanitizer || true)
[ -z "$cs" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && cs=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$cs" ]; then echo "skipped: compute-sanitizer not found"; exit 77; fi
"$dir/hello" >/dev/null 2>&1
[ $? -eq 77 ] && { echo "skipped: no CUDA device"; exit 77; }
bad=0
while read -r name args; do
  for tool in memcheck initcheck; do
    # shellcheck disable=SC2086
    out=$("$cs" --tool "$tool" "$dir/$name" $args 2>&1)
    rc=$?
    summary=$(printf '%s\n' "$out" | grep -m1 'ERROR SUMMARY')
    echo "== $name $tool (exit $rc): $summary"
    case $summary in
      *" 0 errors"*) [ $rc -eq 0 ] || { echo "FAIL: exit $rc"; bad=1; } ;;
      *) printf '%s\n' "$out" | grep -E '^=========' | head -12; bad=1 ;;
    esac
  done
done <<'LIST'
hello
pipeline --quick
scoped_streams --jobs 40
graph_replay --replays 20
config_tuning --rounds 2
LIST
exit $bad
