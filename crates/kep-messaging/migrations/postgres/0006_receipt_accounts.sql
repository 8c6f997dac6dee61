-- A receipt is matched by the account it answers, whichever carrier brought it: an SMPP
-- SMSC may deliver it on any session of the account (SMPP 3.4), and several carriers may
-- bind to one account (an HTTP carrier is an account alone). `carrier` stays the carrier
-- the part was handed to. A row already here has its carrier's name as its account: kep
-- moves an SMPP carrier's rows to its account when it starts (`adopt_receipts`).
ALTER TABLE carrier_receipts ADD COLUMN account TEXT;
UPDATE carrier_receipts SET account = carrier;
ALTER TABLE carrier_receipts
    ALTER COLUMN account SET NOT NULL,
    DROP CONSTRAINT carrier_receipts_pkey,
    ADD PRIMARY KEY (account, carrier_message_id);
