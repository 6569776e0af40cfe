"""Real processes on one machine sharing memory (Hogwild!)."""
