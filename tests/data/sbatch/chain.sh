#!/bin/bash
#SBATCH -J llama-70b
#SBATCH -N 8
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH -p batch
#SBATCH -A proj123
#SBATCH -t 2-00:00:00
#SBATCH --dependency=afterany:4242
#SBATCH --exclude=gpu-a[012,017]
#SBATCH --requeue
#SBATCH --mem=0
#SBATCH --exclusive

module load cuda/12.4
export MASTER_PORT=29500
srun --label --cpu-bind=none python pretrain_gpt.py \
    --tensor-model-parallel-size 8 \
    --save /lustre/ckpt/llama70b \
    --load /lustre/ckpt/llama70b \
    --train-iters 500000
