"""Where the primary's write-ahead log stood at the last access change, for search.replica.

A chunk whose ACL changes or that is deleted (a revocation, a re-upload with a narrower audience, a
document removed) records the primary's WAL insert position in the one row of kb_access_change, at
commit: the trigger is deferred, so the row is locked only while the transaction commits, and only
once per transaction. A replica whose copy of the row is at least the primary's has replayed every
such commit. Not a model: `flush` must not reset it, and no code but search.replica reads it.
"""

from django.db import migrations

FORWARD = """
CREATE TABLE kb_access_change (id smallint PRIMARY KEY CHECK (id = 1), lsn pg_lsn NOT NULL);
INSERT INTO kb_access_change (id, lsn) VALUES (1, pg_current_wal_insert_lsn());

CREATE FUNCTION kb_access_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('kb.access_changed', true) IS DISTINCT FROM 'yes' THEN
        INSERT INTO kb_access_change (id, lsn) VALUES (1, pg_current_wal_insert_lsn())
        ON CONFLICT (id) DO UPDATE SET lsn = greatest(kb_access_change.lsn, excluded.lsn);
        PERFORM set_config('kb.access_changed', 'yes', true);
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER kb_chunk_acl_changed AFTER UPDATE OF acl ON kb_chunk
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.acl IS DISTINCT FROM NEW.acl)
    EXECUTE FUNCTION kb_access_changed();
CREATE CONSTRAINT TRIGGER kb_chunk_deleted AFTER DELETE ON kb_chunk
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION kb_access_changed();
CREATE TRIGGER kb_chunk_truncated AFTER TRUNCATE ON kb_chunk FOR EACH STATEMENT EXECUTE FUNCTION kb_access_changed();
"""

BACKWARD = """
DROP TRIGGER kb_chunk_truncated ON kb_chunk;
DROP TRIGGER kb_chunk_deleted ON kb_chunk;
DROP TRIGGER kb_chunk_acl_changed ON kb_chunk;
DROP FUNCTION kb_access_changed();
DROP TABLE kb_access_change;
"""


class Migration(migrations.Migration):
    dependencies = [("kb", "0010_source_progress_lag")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
