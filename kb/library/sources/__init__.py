"""Sources kept in sync with a KB folder: each kind lists its entries (listing.py), sync.py does the rest."""
