"""TRL's side of the loop: what a job config means to TRL and peft (`config`) and its checks against
the installed TRL (`checks`), the GRPOConfig and GRPOTrainer a job gets (`setup`), the rollout function
TRL calls each step (`rollout_func`), the rows it returns (`rows`) and the reward columns TRL reads
(`rewards`)."""
