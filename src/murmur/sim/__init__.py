"""The simulator: every agent in one process, agent axis first, on a virtual clock."""
