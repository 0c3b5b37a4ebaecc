"""What a conversation is made of: token table, chunk boundaries, chat-template framing. Qt-free."""
