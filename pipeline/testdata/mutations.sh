#!/usr/bin/env bash
# The simulation's mutation table (issue 35, done-when 2): each planted bug
# of the pipeline, applied alone to a temporary copy of the module, against
# the fixed seeds of TestSimulation; it prints how many seeds fail. A
# sharp simulation fails at least 1 % of them (20 of 2,000) for each row.
#
#   pipeline/testdata/mutations.sh                 # every mutation, this module
#   MODULE=/tmp/old pipeline/testdata/mutations.sh # another checkout of the module
#   SEEDS=500 pipeline/testdata/mutations.sh idle split
#
# The module's own files are never touched: each row runs in its own copy.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
module=${MODULE:-$here}
seeds=${SEEDS:-2000}

# name|file|perl substitution (applied to the whole file; it must change it)
mutations=(
  'idle|pipeline/plan.go|s/\(m\.FutureMs == 0 \|\| m\.FutureMs > o\.End\)/true/'
  'lastactivity|pipeline/marks.go|s/if la > t\.End \{/if false {/'
  'joined|pipeline/marks.go|s/t\.Start <= windowFrom\(t\.Mark, t\.HasMark, lookbackMs\)/t.Start <= t.Mark.HwmMs/'
  'debt|pipeline/marks.go|s/t\.Start <= windowFrom\(t\.Mark, t\.HasMark, lookbackMs\)/t.Start <= t.Mark.HwmMs-lookbackMs/'
  'merge|pipeline/marks.go|s/\t\t\tw\.RereadMs, w\.LookbackMs = l\.RereadMs, l\.LookbackMs\n//'
  'crosslookback|pipeline/marks.go|s/if l\.RereadMs != 0 && l\.RereadMs >= w\.RereadMs && .*\{\n\t\t\tw\.RereadMs, w\.LookbackMs = l\.RereadMs, l\.LookbackMs\n/{\n\t\t\tw.RereadMs = max(w.RereadMs, l.RereadMs)\n/'
  'onelookback|pipeline/marks.go|s/if w\.LookbackMs > 0 && l\.LookbackMs > 0 \{/if w.LookbackMs > 0 \&\& w.LookbackMs == l.LookbackMs {/'
  'phase|pipeline/plan.go|s/period := max\(recheck\.Milliseconds\(\), 1\)/period := 2 * max(recheck.Milliseconds(), 1)/'
  'paidpast|pipeline/plan.go|s/return max\(windowFrom\(m, ok, lookbackMs\), min\(m\.HwmMs-lookbackMs, end\+1\)\)/return m.HwmMs - lookbackMs/'
  'rollup|load/analyst/analyst.go|s/lo, hi = min\(lo, d\.SentMinTs\)/lo, hi = d.SentMinTs/'
  'loaded|load/analyst/analyst.go|s/Loaded: d\.Points > 0 && d\.MaxTs == hi/Loaded: d.Points > 0/'
  'drain|pipeline/reader.go|s/for _, req := range r\.q\.drain\(\) \{/for _, req := range r.q.drain()[:0] {/'
  'sent|load/analyst/analyst.go|s/if d\.Sent > 0 \{\n\t\tlo, hi = min\(lo, d\.SentMinTs\), max\(hi, d\.SentMaxTs\)/if d.Points > 0 {\n\t\tlo, hi = min(lo, d.MinTs), max(hi, d.MaxTs)/'
  'recompute|load/analyst/analyst.go|s/if err != nil \{\n(\t\t\treturn fmt\.Errorf\("recompute)/if false {\n$1/'
  'split|pipeline/split.go|s/start: mid \+ 1, end: req\.end, open: req\.open/start: mid + 2, end: req.end, open: req.open/'
  'remainder|pipeline/split.go|s/start: w\.start, end: w\.end, open: w\.open/start: w.start + 1, end: w.end, open: w.open/'
)
describe() {
  case $1 in
  none) echo "no mutation" ;;
  idle) echo "skip-idle without the due-future check (plan.go idle)" ;;
  lastactivity) echo "lastActivity recorded past the read's end (marks.go IncrementalMark)" ;;
  joined) echo "a backfill joins up without the lookback (marks.go BackfillMark)" ;;
  debt) echo "a backfill joins up above what the mark owes (marks.go BackfillMark)" ;;
  merge) echo "the merge keeps the winner's reread, not the greater (marks.go MergeMark)" ;;
  crosslookback) echo "the merge keeps the greater reread across lookbacks, unlowered (marks.go MergeMark at 595bd41)" ;;
  onelookback) echo "the merge keeps the winner's reread across lookbacks (marks.go MergeMark at 19737ae)" ;;
  phase) echo "a variable's phase comes round every two idle_recheck (plan.go RecheckAt)" ;;
  paidpast) echo "a re-read pays what its mark owed past its end (plan.go rereadOf)" ;;
  rollup) echo "the rollup range not widened to From (load/analyst RangeOf)" ;;
  loaded) echo "a range ending on a failed row marked Loaded (load/analyst RangeOf)" ;;
  drain) echo "a cancelled run's queued targets never handed on (reader.go run)" ;;
  sent) echo "the rows of a failed INSERT left out of the rollup range (load/analyst RangeOf)" ;;
  recompute) echo "marks committed after a failed recompute (load/analyst link)" ;;
  split) echo "a split off by one, mid+2 (split.go halves)" ;;
  remainder) echo "a remainder window starting 1 ms late (split.go remainderReads)" ;;
  esac
}

want=("$@")
selected() {
  [ ${#want[@]} -eq 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

tmp=$(mktemp -d /tmp/fleetsync-mutations.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

run() { # name file subst
  local name=$1 file=$2 subst=$3 dir=$tmp/$1
  mkdir -p "$dir"
  (cd "$module" && tar --exclude=.git --exclude=./bin -cf - .) | tar -xf - -C "$dir"
  if [ -n "$file" ]; then
    cp "$dir/$file" "$dir/$file.orig"
    perl -0pi -e "$subst" "$dir/$file"
    if cmp -s "$dir/$file" "$dir/$file.orig"; then
      printf '%-13s %-66s %s\n' "$name" "$(describe "$name")" "NOT APPLIED (the code moved; update the pattern)"
      rm -rf "$dir"
      return
    fi
    rm "$dir/$file.orig"
  fi
  local out start took failed
  start=$(date +%s)
  out=$(cd "$dir" && go test ./pipeline -run 'TestSimulation$' -count=1 -v -sim.seeds "$seeds" -sim.base 1 2>&1 || true)
  took=$(($(date +%s) - start))
  failed=$(printf '%s\n' "$out" | grep ' seeds from ' | grep -o '[0-9]* failed' | head -1 | cut -d' ' -f1)
  if [ -z "$failed" ]; then
    failed="did not run: $(printf '%s\n' "$out" | grep -m1 -E 'error|cannot|undefined|FAIL' || true)"
  fi
  local first
  first=$(printf '%s\n' "$out" | sed -n 's/.*seeds failed: \([0-9]*\).*/\1/p' | head -1)
  printf '%-13s %-66s %5s of %s  (first seed %s, %ss)\n' "$name" "$(describe "$name")" "$failed" "$seeds" "${first:--}" "$took"
  rm -rf "$dir"
}

echo "module $module, $seeds seeds"
selected none && run none "" ""
for m in "${mutations[@]}"; do
  IFS='|' read -r name file subst <<<"$m"
  selected "$name" || continue
  run "$name" "$file" "$subst"
done
