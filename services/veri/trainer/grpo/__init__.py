"""TRL's side of the loop: the GRPOConfig and GRPOTrainer a job gets (`setup`), the rollout function
TRL calls each step (`rollout_func`), the rows it returns (`rows`) and the reward columns TRL reads
(`rewards`)."""
