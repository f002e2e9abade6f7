#!/usr/bin/env bash
# A small, runnable example of the StarForge custom-job contract. Replace the loop with your
# own training; keep the three rules:
#   1. read inputs and topology from the FORGE_* environment variables;
#   2. write only under $FORGE_OUT_DIR (checkpoints in $FORGE_OUT_DIR/checkpoints);
#   3. on SIGTERM (stop or pause), save a checkpoint and exit 143; resume from it next time.
set -euo pipefail

STEPS="${STEPS:-20}"                 # how many steps the "training" runs
STEP_SECONDS="${STEP_SECONDS:-0.1}"  # how long one step takes
SAVE_EVERY="${SAVE_EVERY:-5}"        # write a checkpoint every this many steps

if [[ -z "${FORGE_OUT_DIR:-}" ]]; then
    echo "train.sh: error: FORGE_OUT_DIR is not set (the platform sets it)" >&2
    exit 2
fi
CKPT_DIR="$FORGE_OUT_DIR/checkpoints"
mkdir -p "$CKPT_DIR"

echo "[topology] what the platform gave this job:"
env | grep -E '^(FORGE_[A-Z_]*|NNODES|NODE_RANK|GPUS_PER_NODE|MASTER_ADDR|MASTER_PORT|CUDA_VISIBLE_DEVICES)=' \
    | sort | sed 's/^/  /' || true

done_step=0   # last completed step
saved_step=-1 # last step written to a checkpoint
sleeper=""    # pid of the current step's background sleep

# Write checkpoint step-N atomically (temp file, then rename) so a kill never leaves half a file.
# The temp file is this process's own: every node of a multi-node run shares $FORGE_OUT_DIR.
save_checkpoint() {
    local step="$1" path="$CKPT_DIR/step-$1"
    printf 'step=%s\nloss=%s\n' "$step" "$(loss_at "$step")" > "$path.tmp.$$"
    mv -f "$path.tmp.$$" "$path"
    saved_step="$step"
    echo "[checkpoint] $path"
}

# A made-up loss curve: 2/sqrt(step).
loss_at() {
    awk -v s="$1" 'BEGIN { printf "%.4f", (s > 0 ? 2 / sqrt(s) : 2) }'
}

on_sigterm() {
    # One save: a second SIGTERM (a scheduler and the platform may both send one) must not run
    # this again halfway through, which bash does not survive cleanly.
    trap '' TERM
    [[ -n "$sleeper" ]] && kill "$sleeper" 2>/dev/null || true
    echo "[signal] SIGTERM after step $done_step: saving and exiting"
    if (( done_step > 0 && done_step != saved_step )); then
        save_checkpoint "$done_step"
    fi
    exit 143
}
trap on_sigterm TERM

# Resume: FORGE_RESUME_FROM if the platform gave one, else the numerically latest step-N here.
resume="${FORGE_RESUME_FROM:-}"
if [[ -z "$resume" ]]; then
    latest=-1
    for path in "$CKPT_DIR"/step-*; do
        n="${path##*/step-}"
        if [[ "$n" =~ ^[0-9]+$ ]] && (( 10#$n > latest )); then
            latest=$(( 10#$n ))
        fi
    done
    if (( latest >= 0 )); then
        resume="$CKPT_DIR/step-$latest"
    fi
fi
if [[ -n "$resume" ]]; then
    done_step="$(sed -n 's/^step=//p' "$resume" 2>/dev/null | head -n 1 || true)"
    if [[ ! -f "$resume" || ! "$done_step" =~ ^[0-9]+$ ]]; then
        echo "train.sh: error: $resume is not a checkpoint of this script (no step=N line)" >&2
        exit 2
    fi
    saved_step="$done_step"
    echo "[resume] from $resume (step $done_step)"
fi

for (( step = done_step + 1; step <= STEPS; step++ )); do
    # Sleep in the background and wait for it: bash runs the trap as soon as a signal arrives
    # during `wait`, but only after a foreground command (like sleep) has finished.
    sleep "$STEP_SECONDS" &
    sleeper=$!
    wait "$sleeper"
    sleeper=""
    done_step="$step"
    echo "step $step/$STEPS loss $(loss_at "$step")"
    if (( step % SAVE_EVERY == 0 )); then
        save_checkpoint "$step"
    fi
done

if (( done_step != saved_step )); then
    save_checkpoint "$done_step"
fi
echo "[done] $done_step steps; outputs in $FORGE_OUT_DIR"
