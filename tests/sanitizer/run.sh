#!/usr/bin/env bash
# Runs `planted` (PATH given as $1) under compute-sanitizer memcheck: every planted error must
# be reported as an invalid global write, and the clean run must report 0 errors. Prints each
# run's report lines. Exit 77 (skipped) without compute-sanitizer or a device.
set -u
planted=$1
cs=$(command -v compute-sanitizer || true)
[ -z "$cs" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && cs=/usr/local/cuda/bin/compute-sanitizer
if [ -z "$cs" ]; then echo "skipped: compute-sanitizer not found"; exit 77; fi
"$planted" none >/dev/null 2>&1
[ $? -eq 77 ] && { echo "skipped: no CUDA device"; exit 77; }
bad=0
for mode in uaf oob batch scope clean raw; do
  out=$("$cs" --tool memcheck "$planted" "$mode" 2>&1)
  summary=$(printf '%s\n' "$out" | grep -m1 'ERROR SUMMARY')
  echo "== $mode: $summary"
  printf '%s\n' "$out" | grep -E 'Invalid __global__|is out of bounds|bytes after|Address 0x' | head -4
  if [ "$mode" = clean ]; then
    case $summary in *" 0 errors"*) ;; *) echo "FAIL: the clean run reported errors"; bad=1;; esac
    printf '%s\n' "$out" | grep -q 'planted clean: ran' || { echo "FAIL: clean did not run"; bad=1; }
  else
    printf '%s\n' "$out" | grep -q 'Invalid __global__ write' ||
      { echo "FAIL: $mode: no invalid write reported"; printf '%s\n' "$out" | tail -20; bad=1; }
  fi
done
exit $bad
