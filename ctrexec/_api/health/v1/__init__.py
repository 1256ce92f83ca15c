"""generated; do not edit"""
