"""The trained weights: their state dict as a policy server loads it (`state`), pushing it to the
policy after each step (`sync`), and the policy server's weight routes (`policy_admin`)."""
