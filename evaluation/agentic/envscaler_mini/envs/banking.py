import copy
from typing import Optional


class RetailBank:
    """Branch banking console: customers, their accounts (known to people by account number), debit
    cards (known by their last four digits) and the transfers between accounts.

    Rules:
    - Transfers need two different open accounts, a positive amount and enough balance.
    - Only open accounts can be frozen; only frozen accounts can be unfrozen.
    - Only active cards can be blocked or get a new daily limit; blocking is final.
    - A card's daily limit must be between 1 and 5000.
    """

    MAX_DAILY_LIMIT = 5000

    def __init__(self, init_config: Optional[dict] = None):
        self.customers = {}
        self.accounts = {}
        self.cards = {}
        self.transactions = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _account(self, account_id):
        account = self.accounts.get(account_id)
        if account is None:
            return None, {"success": False, "error": f"Account id '{account_id}' not found."}
        return account, None

    def _active_card(self, card_id):
        card = self.cards.get(card_id)
        if card is None:
            return None, {"success": False, "error": f"Card id '{card_id}' not found."}
        if card["status"] != "active":
            return None, {"success": False, "error": f"Card {card['last4']} is {card['status']}."}
        return card, None

    # -- query tools --

    def find_customer(self, name: str) -> dict:
        """Find customers by (part of) their name.

        Args:
            name: Full or partial customer name.
        """
        needle = name.strip().lower()
        found = [{"customer_id": cid, **c} for cid, c in self.customers.items() if needle in c["name"].lower()]
        if not found:
            return {"success": False, "error": f"No customer matches '{name}'."}
        return {"success": True, "data": found}

    def list_accounts(self, customer_id: str) -> dict:
        """List a customer's accounts with ids, numbers, types, balances and status.

        Args:
            customer_id: Internal customer id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"Customer id '{customer_id}' not found."}
        found = [{"account_id": aid, **a} for aid, a in self.accounts.items() if a["customer_id"] == customer_id]
        return {"success": True, "data": found}

    def get_account_by_number(self, account_number: str) -> dict:
        """Look up an account by its account number (owner name included).

        Args:
            account_number: Account number, e.g. '40-1187-22'.
        """
        for aid, account in self.accounts.items():
            if account["account_number"] == account_number:
                owner = self.customers.get(account["customer_id"], {}).get("name")
                return {"success": True, "data": {"account_id": aid, "owner": owner, **account}}
        return {"success": False, "error": f"No account with number '{account_number}'."}

    def list_transactions(self, account_id: str) -> dict:
        """List the transfers into or out of an account.

        Args:
            account_id: Internal account id.
        """
        if account_id not in self.accounts:
            return {"success": False, "error": f"Account id '{account_id}' not found."}
        found = [{"transaction_id": tid, **t} for tid, t in self.transactions.items()
                 if account_id in (t["from_account_id"], t["to_account_id"])]
        return {"success": True, "data": found}

    def list_cards(self, account_id: str) -> dict:
        """List the cards linked to an account.

        Args:
            account_id: Internal account id.
        """
        if account_id not in self.accounts:
            return {"success": False, "error": f"Account id '{account_id}' not found."}
        found = [{"card_id": cid, **c} for cid, c in self.cards.items() if c["account_id"] == account_id]
        return {"success": True, "data": found}

    # -- modification tools --

    def transfer_funds(self, from_account_id: str, to_account_id: str, amount: float, memo: str) -> dict:
        """Move money between two open accounts.

        Args:
            from_account_id: Internal id of the account to debit.
            to_account_id: Internal id of the account to credit.
            amount: Amount to move, positive, at most the source balance.
            memo: Short description shown on both statements.
        """
        source, error = self._account(from_account_id)
        if error:
            return error
        target, error = self._account(to_account_id)
        if error:
            return error
        if from_account_id == to_account_id:
            return {"success": False, "error": "Source and destination must differ."}
        for account in (source, target):
            if account["status"] != "open":
                return {"success": False, "error": f"Account {account['account_number']} is {account['status']}."}
        if amount <= 0:
            return {"success": False, "error": "Amount must be positive."}
        if amount > source["balance"]:
            return {"success": False, "error": f"Insufficient funds: balance is {source['balance']}."}
        source["balance"] = round(source["balance"] - amount, 2)
        target["balance"] = round(target["balance"] + amount, 2)
        n = len(self.transactions) + 1
        while f"TX-{n}" in self.transactions:
            n += 1
        self.transactions[f"TX-{n}"] = {"from_account_id": from_account_id, "to_account_id": to_account_id,
                                        "amount": amount, "memo": memo}
        return {"success": True, "data": {"transaction_id": f"TX-{n}", "from_balance": source["balance"],
                                          "to_balance": target["balance"]}}

    def freeze_account(self, account_id: str, reason: str) -> dict:
        """Freeze an open account (no transfers in or out until unfrozen).

        Args:
            account_id: Internal account id.
            reason: Why the account is frozen.
        """
        account, error = self._account(account_id)
        if error:
            return error
        if account["status"] != "open":
            return {"success": False, "error": f"Account is {account['status']}, not open."}
        account["status"] = "frozen"
        account["freeze_reason"] = reason
        return {"success": True, "data": {"account_id": account_id, "status": "frozen"}}

    def unfreeze_account(self, account_id: str) -> dict:
        """Reopen a frozen account.

        Args:
            account_id: Internal account id.
        """
        account, error = self._account(account_id)
        if error:
            return error
        if account["status"] != "frozen":
            return {"success": False, "error": f"Account is {account['status']}, not frozen."}
        account["status"] = "open"
        account.pop("freeze_reason", None)
        return {"success": True, "data": {"account_id": account_id, "status": "open"}}

    def block_card(self, card_id: str, reason: str) -> dict:
        """Permanently block an active card.

        Args:
            card_id: Internal card id.
            reason: Why the card is blocked, e.g. 'lost' or 'stolen'.
        """
        card, error = self._active_card(card_id)
        if error:
            return error
        card["status"] = "blocked"
        card["block_reason"] = reason
        return {"success": True, "data": {"card_id": card_id, **card}}

    def update_card_limit(self, card_id: str, daily_limit: int) -> dict:
        """Set the daily spending limit of an active card.

        Args:
            card_id: Internal card id.
            daily_limit: New limit, 1 to 5000.
        """
        card, error = self._active_card(card_id)
        if error:
            return error
        if not 1 <= daily_limit <= self.MAX_DAILY_LIMIT:
            return {"success": False, "error": f"Daily limit must be between 1 and {self.MAX_DAILY_LIMIT}."}
        card["daily_limit"] = daily_limit
        return {"success": True, "data": {"card_id": card_id, **card}}
