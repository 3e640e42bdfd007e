#!/bin/bash
#SBATCH --job-name=vit-h
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=96
#SBATCH --time=12:00:00
#SBATCH --qos=high
#SBATCH --constraint=h100

source /home/me/venv/bin/activate
export OMP_NUM_THREADS=8
srun torchrun --nnodes=$SLURM_NNODES --nproc_per_node=8 --rdzv_backend=c10d \
  --rdzv_endpoint=$MASTER_ADDR:29500 train.py --output_dir /scratch/vit --resume_from_checkpoint /scratch/vit/last
