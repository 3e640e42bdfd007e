#!/bin/bash
#SBATCH --job-name=lr-sweep
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --time=04:00:00
#SBATCH --array=0-3%2

# a learning-rate sweep: each array task trains with its own rate, two at a time
LRS=(1e-4 3e-4 1e-3 3e-3)
LR=${LRS[$SLURM_ARRAY_TASK_ID]}
srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint "$(hostname):29500" \
    train.py --lr "$LR" --save "/ckpt/lr-sweep/$SLURM_ARRAY_TASK_ID" --load "/ckpt/lr-sweep/$SLURM_ARRAY_TASK_ID"
