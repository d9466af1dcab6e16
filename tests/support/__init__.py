"""Helpers shared by several test directories (external servers, fixtures) - not tests themselves."""
