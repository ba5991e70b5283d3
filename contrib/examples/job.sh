#!/bin/bash
# A complete Mosaic job: submit it from the repository root with
#     mosaic submit contrib/examples/job.sh
# (sbatch options after '--': mosaic submit contrib/examples/job.sh -- --gres=gpu:4).
#
# GPUs: ask with --gres=gpu:N (per node). mosaic-run starts one rank per GPU with srun,
# so no --ntasks is needed; --gpus / --gpus-per-task jobs run, but Slurm refuses to resize them.
#SBATCH --job-name=mosaic-example
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=4
#SBATCH --mem=4G
# A relaunched job (resized, moved, preempted) appends to its output instead of truncating it.
#SBATCH --open-mode=append
#SBATCH --output=mosaic-example-%j.out
#
# What Mosaic may know and change. --global-batch-size is the examples per optimizer step:
# it never changes when the GPU count does (mosaic-run derives micro-batch x accumulation).
#MOSAIC --model resnet50 --framework torch --global-batch-size 16
#MOSAIC --plan '{"micro_batch": 4}'

# exec: the controller's checkpoint signal (USR1) reaches mosaic-run, not a shell that dies of it.
# The training script calls dist.init_process_group itself (mosaic-run sets RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT), checkpoints when rt.should_checkpoint() says so, resumes with
# rt.load_checkpoint(), and ends with rt.done().
exec mosaic-run --framework torch -- \
    python "$SLURM_SUBMIT_DIR/contrib/examples/train_torch.py" \
    --steps "${STEPS:-200}" --step-sleep "${STEP_SLEEP:-0.1}" \
    --loss-log "mosaic-example-$SLURM_JOB_ID.loss.jsonl"
