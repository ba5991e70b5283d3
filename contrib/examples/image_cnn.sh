#!/bin/bash
# A CPU-bound image training job (contrib/examples/image_cnn.py): JPEG decode and augmentation
# in one DataLoader worker per CPU feed a small CNN, so its throughput grows with the CPUs it
# gets. Submit from the repository root:
#     mosaic submit contrib/examples/image_cnn.sh
# With text_transformer.sh beside it under the synergy-tune policy, Mosaic gives this job the
# CPUs the language job does not need (its #MOSAIC --model names the profile to use:
# mosaic profile --example image-cnn measures one).
#
# The model computes on the CPU (one torch thread); the GPU is what the scheduler counts and
# places (Synergy divides a node's CPUs and memory among its GPUs' jobs).
#SBATCH --job-name=image-cnn
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
# A relaunched job (resized, moved, preempted) appends to its output instead of truncating it.
#SBATCH --open-mode=append
#SBATCH --output=image-cnn-%j.out
#MOSAIC --model image-cnn --framework torch --global-batch-size 32

# exec: the controller's checkpoint signal (USR1) reaches mosaic-run, not a shell that dies of it.
# The images are generated once per node into $TMPDIR (or /tmp) unless DATA names a directory;
# a relaunch resumes from the newest checkpoint and reads the CPUs of its new allocation.
exec mosaic-run --framework torch -- \
    python "$SLURM_SUBMIT_DIR/contrib/examples/image_cnn.py" \
    --steps "${STEPS:-2000}" ${DATA:+--data "$DATA"} \
    --loss-log "image-cnn-$SLURM_JOB_ID.loss.jsonl"
