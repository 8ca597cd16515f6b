"""The ``sql`` connector type: any SQLAlchemy URL (:mod:`.connector`), and the PostgreSQL read role's reach to sensitive columns with the masked views a DBA would give it (:mod:`.masked_views`)."""
