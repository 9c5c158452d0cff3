"""The conversations domain: each user's chats, stored server-side, and search over them."""
