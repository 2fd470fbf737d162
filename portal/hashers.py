"""How local passwords are stored (docs/identity.md "Local passwords", issue 32 item 12)."""

from django.contrib.auth.hashers import Argon2PasswordHasher


class Argon2idPasswordHasher(Argon2PasswordHasher):
    """Argon2id at the first cost the OWASP Password Storage Cheat Sheet recommends: 19 MiB of
    memory, 2 passes, 1 lane. Memory-hard, so a GPU guesses far slower than against PBKDF2, and
    ~40 ms of one core per sign-in where Django's default PBKDF2 (1,000,000 iterations) took
    0.3–0.5 s and Django's own Argon2 parameters (100 MiB, 8 lanes) 0.4 s on our 2-core machine.

    The algorithm keeps Django's name ("argon2"): an Argon2 hash stored with other parameters
    verifies with those (they are in the hash) and is re-hashed with these on sign-in."""

    time_cost = 2
    memory_cost = 19 * 1024  # KiB
    parallelism = 1
