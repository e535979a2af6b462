"""Conversations, answers and their websocket stream."""
