"""Database guards: the usage ledger and month closes are append-only, and a closed statement
(its state, its total, its lines) never changes. Enforced by triggers so that no code path —
the admin, a shell, a future bug — can rewrite what was billed. (TRUNCATE, used only by test
database flushes, fires no row trigger.)"""

from django.db import migrations

SQL = """
CREATE FUNCTION billing_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'billing: % is append-only (% refused)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER usage_append_only BEFORE UPDATE OR DELETE ON billing_usagerecord
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();
CREATE TRIGGER month_close_append_only BEFORE UPDATE OR DELETE ON billing_monthclose
    FOR EACH ROW EXECUTE FUNCTION billing_refuse_change();

CREATE FUNCTION billing_statement_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'closed' THEN
        RAISE EXCEPTION 'billing: statement % is closed and never changes (% refused)', OLD.id, TG_OP
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER statement_closed_is_final BEFORE UPDATE OR DELETE ON billing_statement
    FOR EACH ROW EXECUTE FUNCTION billing_statement_guard();

-- Statement-level, with transition tables: the close inserts thousands of lines in one
-- statement, and one check per statement costs nothing next to one query per line.
CREATE FUNCTION billing_lines_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF EXISTS (SELECT 1 FROM new_rows n JOIN billing_statement s ON s.id = n.statement_id
                   WHERE s.state = 'closed') THEN
            RAISE EXCEPTION 'billing: a closed statement''s lines never change (% refused)', TG_OP
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF EXISTS (SELECT 1 FROM old_rows o JOIN billing_statement s ON s.id = o.statement_id
                   WHERE s.state = 'closed') THEN
            RAISE EXCEPTION 'billing: a closed statement''s lines never change (% refused)', TG_OP
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER statement_line_insert_guard AFTER INSERT ON billing_statementline
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_lines_guard();
CREATE TRIGGER statement_line_update_guard AFTER UPDATE ON billing_statementline
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing_lines_guard();
CREATE TRIGGER statement_line_delete_guard AFTER DELETE ON billing_statementline
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_lines_guard();
"""

REVERSE = """
DROP TRIGGER statement_line_delete_guard ON billing_statementline;
DROP TRIGGER statement_line_update_guard ON billing_statementline;
DROP TRIGGER statement_line_insert_guard ON billing_statementline;
DROP TRIGGER statement_closed_is_final ON billing_statement;
DROP TRIGGER month_close_append_only ON billing_monthclose;
DROP TRIGGER usage_append_only ON billing_usagerecord;
DROP FUNCTION billing_lines_guard();
DROP FUNCTION billing_statement_guard();
DROP FUNCTION billing_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunSQL(SQL, REVERSE)]
