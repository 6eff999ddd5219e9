"""The rank side: what runs under torchrun in each process (torch)."""
