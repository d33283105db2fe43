"""Starts and stops vLLM servers for the sleepwake suite; see server.py for the entry point."""
