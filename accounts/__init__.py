"""Users, groups, access principals and API tokens."""
