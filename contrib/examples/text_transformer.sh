#!/bin/bash
# A compute-bound language-model training job (contrib/examples/text_transformer.py): a small
# transformer on in-memory tokens, no decode and no loader workers, computing on one torch
# thread, so CPUs beyond the first do not change its throughput. Submit from the repository root:
#     mosaic submit contrib/examples/text_transformer.sh
# (mosaic profile --example text-transformer measures its flat CPU curve).
#
# The model computes on the CPU; the GPU is what the scheduler counts and places.
#SBATCH --job-name=text-transformer
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --open-mode=append
#SBATCH --output=text-transformer-%j.out
#MOSAIC --model text-transformer --framework torch --global-batch-size 16

exec mosaic-run --framework torch -- \
    python "$SLURM_SUBMIT_DIR/contrib/examples/text_transformer.py" \
    --steps "${STEPS:-2000}" \
    --loss-log "text-transformer-$SLURM_JOB_ID.loss.jsonl"
