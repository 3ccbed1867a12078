#!/usr/bin/env bash
# Makes the working tree small enough for the `device` tool, reversibly.
#
# The device tool sends tracked + untracked-not-ignored files, at most 64 MiB;
# the fixture models make the tracked tree ~95 MB. This script stops the
# largest fixtures from travelling WITHOUT deleting them or committing
# anything:
#
#   scripts/gpu-slim.sh on      1. records the branch (or commit) you are on in .git/pl-gpu-slim
#                               2. git switch -c pl-gpu-slim   (HEAD moves to a new branch at the
#                                  same commit; your uncommitted changes come along untouched),
#                                  so a stray commit cannot land on your branch
#                               3. git rm --cached the fixtures below (index only: the files stay
#                                  on disk, byte for byte) and lists them in .git/info/exclude
#                                  between "# pl-gpu-slim" marker lines
#                               4. prints what would travel now
#   scripts/gpu-slim.sh off     the reverse: git reset -- the fixtures (index entries back from
#                               HEAD, the same commit), the marker block out of .git/info/exclude,
#                               git switch back to the recorded branch, git branch -d pl-gpu-slim;
#                               refuses if anything was committed on pl-gpu-slim
#   scripts/gpu-slim.sh status  on or off, and the size that would travel
#
# While slim, `git status` shows the fixtures as staged deletions: that is
# the point (they are not in the index); do not commit on pl-gpu-slim, run
# `off` when the device work is done. scripts/gpu-check.sh skips (and names)
# golden fixtures whose model file does not travel.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
GIT_DIR=$(git rev-parse --git-dir)
STATE="$GIT_DIR/pl-gpu-slim"
EXCLUDE="$GIT_DIR/info/exclude"
BRANCH=pl-gpu-slim
BEGIN="# pl-gpu-slim begin (scripts/gpu-slim.sh off removes this block)"
END="# pl-gpu-slim end"
# The largest fixtures (together ~43 MB of the ~95): f32, the untied and
# qwen2 f16 models, bf16. Their goldens stay (small).
FILES=(
  tests/fixtures/models/tiny-qwen3-f32.gguf
  tests/fixtures/models/tiny-qwen3-untied-f16.gguf
  tests/fixtures/models/tiny-qwen2-f16.gguf
  tests/fixtures/models/tiny-qwen3-bf16.gguf
)

# Bytes of what the device tool would send: the index's files plus the
# untracked files that are not ignored (shared/ and carried paths not counted).
travel_bytes() {
  { git ls-files -z; git ls-files -z --others --exclude-standard; } |
    xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {printf "%.1f MiB", s / 1048576}'
}

is_on() { [ -f "$STATE" ]; }

cmd_status() {
  if is_on; then
    echo "gpu-slim: on (branch $(git rev-parse --abbrev-ref HEAD), back to '$(cat "$STATE")' with: scripts/gpu-slim.sh off)"
  else
    echo "gpu-slim: off"
  fi
  echo "gpu-slim: would travel: $(travel_bytes) (limit 64 MiB)"
}

cmd_on() {
  if is_on; then echo "gpu-slim: already on"; cmd_status; return 0; fi
  if git show-ref --verify --quiet "refs/heads/$BRANCH"; then
    echo "gpu-slim: a branch $BRANCH exists already (a slim that was not undone?); look at it, then" >&2
    echo "  git branch -d $BRANCH   and run this again" >&2
    exit 1
  fi
  local back
  back=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)   # a branch, or a detached commit
  for f in "${FILES[@]}"; do
    git ls-files --error-unmatch -- "$f" >/dev/null 2>&1 || { echo "gpu-slim: $f is not tracked; nothing done" >&2; exit 1; }
  done
  git switch -q -c "$BRANCH"
  echo "$back" >"$STATE"
  git rm -q --cached -- "${FILES[@]}"
  mkdir -p "$(dirname "$EXCLUDE")"
  { echo "$BEGIN"; for f in "${FILES[@]}"; do echo "/$f"; done; echo "$END"; } >>"$EXCLUDE"
  for f in "${FILES[@]}"; do [ -f "$f" ] || { echo "gpu-slim: $f vanished from disk?" >&2; exit 1; }; done
  echo "gpu-slim: on: ${#FILES[@]} fixtures stay on disk but no longer travel (branch $BRANCH; undo: scripts/gpu-slim.sh off)"
  cmd_status
}

cmd_off() {
  if ! is_on; then echo "gpu-slim: already off"; return 0; fi
  local back cur
  back=$(cat "$STATE")
  cur=$(git symbolic-ref -q --short HEAD || echo "(detached)")
  if [ "$cur" != "$BRANCH" ]; then
    echo "gpu-slim: expected to be on branch $BRANCH, but HEAD is $cur; switch back to it, then run this again" >&2
    exit 1
  fi
  if [ -n "$(git rev-list "$back..$BRANCH" 2>/dev/null)" ] || [ "$(git rev-parse "$back")" != "$(git rev-parse HEAD)" ]; then
    echo "gpu-slim: $BRANCH and '$back' are not the same commit any more (a commit on either); sort that out" >&2
    echo "  yourself (the fixtures are still on disk)," >&2
    echo "  then: git reset -- ${FILES[*]}; remove the pl-gpu-slim block from $EXCLUDE; rm $STATE" >&2
    exit 1
  fi
  git reset -q -- "${FILES[@]}"   # index entries back from HEAD (the commit $back points at)
  awk -v b="$BEGIN" -v e="$END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' "$EXCLUDE" >"$EXCLUDE.tmp" &&
    mv "$EXCLUDE.tmp" "$EXCLUDE"
  if git show-ref --verify --quiet "refs/heads/$back"; then git switch -q "$back"; else git switch -q --detach "$back"; fi
  git branch -q -d "$BRANCH"
  rm -f "$STATE"
  local dirty
  dirty=$(git status --porcelain -- "${FILES[@]}")
  if [ -n "$dirty" ]; then echo "gpu-slim: warning: the fixtures are not clean: $dirty" >&2; exit 1; fi
  echo "gpu-slim: off: back on '$back', every fixture tracked again"
  cmd_status
}

case "${1:-status}" in
  on) cmd_on ;;
  off) cmd_off ;;
  status) cmd_status ;;
  -h|--help) sed -n '2,27p' "$0" ;;
  *) echo "usage: scripts/gpu-slim.sh on|off|status" >&2; exit 2 ;;
esac
