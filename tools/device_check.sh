#!/usr/bin/env bash
# The GPU checks of chapters 8 and 9, as one prepared script (run from the repository root).
#
#   tools/device_check.sh            on a machine with a CUDA GPU
#   tools/device_check.sh --dry-run  the same steps on the CPU with tiny models (seconds):
#                                    a smoke test of the script, its numbers mean nothing
#
# 1. `gpu`: the OPT shapes in float16, L = 5: mspec at K = 1 against transformers' assisted
#    generation (goal (a)), and K = 2 and 4 against K = 1 (the split table and token rates).
#    Real OPT checkpoints when the Hugging Face hub is reachable, else random weights of the
#    same shapes (timing only; the output says which ran).
# 2. Chapter 9's prediction: `trained-draft-regime --preset opt` scores OPT-125M drafting for
#    a larger OPT (default OPT-1.3B) at temperature 1 on the chapter's positions, exactly,
#    with IS (whole ranking and alphabet 40), SpecTr, SpecInfer and the optimum, under top-5,
#    top-10, top-p 0.95 and the full vocabulary. It needs the real checkpoints (the hub, or
#    the Hugging Face cache); without them it says so and the script goes on.
#
# Results go to $OUT (default /tmp/device-check): gpu.txt, opt_regime.json, opt_regime.txt.
# Budget: at most 5 minutes for step 1 and 4 for step 2 (PROMPTS prompts per dataset), so the
# whole script fits one 10-minute device call.
set -u
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT=${OUT:-/tmp/device-check}
PROMPTS=${PROMPTS:-4}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0

if [ "$DRY" = 1 ]; then
  GPU_ARGS=(--dry-run)
  REGIME_ARGS=(--preset tiny --quick --data-source builtin --datasets xsum --prompts 1 --positions 3
               --threads 1)
else
  nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu_name.txt"
  GPU_ARGS=(--weights auto)
  REGIME_ARGS=(--preset opt --data-source "${DATA_SOURCE:-auto}" --datasets xsum dolly
               --prompts "$PROMPTS")
fi

echo "== 1. gpu: OPT shapes, float16, L = 5, K = 1, 2, 4"
timeout 300 python -m mspec_lab gpu "${GPU_ARGS[@]}" --drafts-k 1 2 4 --draft-length 5 \
  2>&1 | tee "$OUT/gpu.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== 2. OPT at temperature 1: top-5, top-10, top-p 0.95, full vocabulary"
timeout 240 python -m mspec_lab trained-draft-regime "${REGIME_ARGS[@]}" \
  --out "$OUT/opt_regime.json" 2>&1 | tee "$OUT/opt_regime.txt"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

echo "== done (exit $status); results in $OUT"
exit $status
