"""Conversation files to and from other formats: the JSON export and import
(:mod:`.transfer`), other apps' chats (:mod:`.foreign_import`) and character cards
(:mod:`.character_card`).  Each writes a whole new file through the store (a layer below),
or reads one out of it."""
