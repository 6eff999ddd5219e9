"""What things cost: stage times and bytes, links, collectives, the data-parallel group, descriptions, balancing."""
