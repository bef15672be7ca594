"""Banking: customers by name, accounts by type or number, cards by last four digits."""

from ._common import TaskBook, call, check, close

ENV_CLASS = "RetailBank"


def _acct(number, customer, kind, balance, status="open"):
    return {"account_number": number, "customer_id": customer, "type": kind, "balance": balance, "status": status}


INIT_CONFIG = {
    "customers": {"CU-410": {"name": "Nadia Rahman"}, "CU-411": {"name": "George Whitaker"},
                  "CU-412": {"name": "Ines Moreau"}, "CU-413": {"name": "Kwame Asante"}},
    "accounts": {
        "AC-5521": _acct("40-1187-22", "CU-410", "checking", 2450.0),
        "AC-5522": _acct("40-1187-35", "CU-410", "savings", 10200.0),
        "AC-5530": _acct("40-2290-11", "CU-411", "checking", 310.5),
        "AC-5531": _acct("40-2290-48", "CU-411", "savings", 5000.0, "frozen"),
        "AC-5540": _acct("40-3355-02", "CU-412", "checking", 1875.25),
        "AC-5550": _acct("40-4410-09", "CU-413", "checking", 640.0),
        "AC-5551": _acct("40-4410-61", "CU-413", "savings", 2200.0),
    },
    "cards": {
        "CD-81": {"account_id": "AC-5521", "last4": "4417", "status": "active", "daily_limit": 1000},
        "CD-82": {"account_id": "AC-5530", "last4": "9032", "status": "active", "daily_limit": 500},
        "CD-83": {"account_id": "AC-5540", "last4": "2288", "status": "active", "daily_limit": 1500},
        "CD-84": {"account_id": "AC-5550", "last4": "7761", "status": "blocked", "daily_limit": 800},
        "CD-85": {"account_id": "AC-5521", "last4": "6120", "status": "active", "daily_limit": 300},
    },
    "transactions": {
        "TX-1": {"from_account_id": "AC-5540", "to_account_id": "AC-5521", "amount": 89.9, "memo": "bike repair"},
        "TX-2": {"from_account_id": "AC-5550", "to_account_id": "AC-5530", "amount": 120.0, "memo": "tutoring"},
    },
}

ACCOUNTS = INIT_CONFIG["accounts"]
NAME = {cid: c["name"] for cid, c in INIT_CONFIG["customers"].items()}
BY_NUMBER = {a["account_number"]: aid for aid, a in ACCOUNTS.items()}


def _usd(amount: float) -> str:
    return f"${amount:,.2f}".replace(".00", "")


def _of(cust: str, kind: str) -> str:
    return next(aid for aid, a in ACCOUNTS.items() if a["customer_id"] == cust and a["type"] == kind)


def _balance(aid: str, value: float) -> dict:
    return check(f"balance of {ACCOUNTS[aid]['account_number']} is {value:.2f}",
                 close(f"s['accounts'][{aid!r}]['balance']", round(value, 2)))


def _moved(src: str, dst: str, amount: float) -> list[dict]:
    return [_balance(src, ACCOUNTS[src]["balance"] - amount), _balance(dst, ACCOUNTS[dst]["balance"] + amount)]


def _lookup(cust: str) -> list[dict]:
    return [call("find_customer", name=NAME[cust]), call("list_accounts", customer_id=cust)]


def build(book: TaskBook) -> None:
    # Between a customer's own accounts.
    for cust, src, dst, amount in [("CU-410", "checking", "savings", 500), ("CU-413", "checking", "savings", 200),
                                   ("CU-413", "savings", "checking", 1000), ("CU-410", "savings", "checking", 1200)]:
        a, b = _of(cust, src), _of(cust, dst)
        book.add(f"{NAME[cust]} wants to move {_usd(amount)} from their {src} account to their {dst} account.",
                 _moved(a, b, amount),
                 _lookup(cust) + [call("transfer_funds", from_account_id=a, to_account_id=b, amount=amount,
                                       memo=f"{src} to {dst}")])

    # Pay someone else's account, given by number.
    for cust, number, amount, memo in [("CU-410", "40-3355-02", 150, "rent share"),
                                       ("CU-412", "40-4410-09", 75.25, "concert tickets"),
                                       ("CU-413", "40-2290-11", 60, "football club fee"),
                                       ("CU-411", "40-1187-22", 300.5, "car repair")]:
        a, b = _of(cust, "checking"), BY_NUMBER[number]
        book.add(f"{NAME[cust]} wants to pay {_usd(amount)} from their checking account to account {number}, "
                 f"memo '{memo}'.",
                 _moved(a, b, amount) + [check(f"transfer '{memo}' recorded",
                                               f"any(t['memo'] == {memo!r} and t['to_account_id'] == {b!r} "
                                               f"for t in s['transactions'].values())")],
                 _lookup(cust) + [call("get_account_by_number", account_number=number),
                                  call("transfer_funds", from_account_id=a, to_account_id=b, amount=amount, memo=memo)])

    book.add("George Whitaker's savings account was frozen by mistake. Unfreeze it and then move $400 from it "
             "into his checking account.",
             [check("AC-5531 open", "s['accounts']['AC-5531']['status'] == 'open'")] + _moved("AC-5531", "AC-5530", 400),
             _lookup("CU-411") + [call("unfreeze_account", account_id="AC-5531"),
                                  call("transfer_funds", from_account_id="AC-5531", to_account_id="AC-5530",
                                       amount=400, memo="savings to checking")])
    book.add("George Whitaker's savings account was frozen after a check that has now been cleared. Unfreeze it.",
             [check("AC-5531 open", "s['accounts']['AC-5531']['status'] == 'open'")],
             _lookup("CU-411") + [call("unfreeze_account", account_id="AC-5531")])

    # Freeze.
    for cust, kind, reason in [("CU-412", "checking", "suspected fraud"), ("CU-413", "savings", "customer request"),
                               ("CU-410", "savings", "disputed deposit")]:
        aid = _of(cust, kind)
        book.add(f"Freeze {NAME[cust]}'s {kind} account (reason: {reason}).",
                 [check(f"{aid} frozen", f"s['accounts'][{aid!r}]['status'] == 'frozen'")],
                 _lookup(cust) + [call("freeze_account", account_id=aid, reason=reason)])
    for number in ["40-4410-09", "40-2290-11"]:
        aid = BY_NUMBER[number]
        book.add(f"Account {number} shows suspicious activity. Freeze it.",
                 [check(f"{aid} frozen", f"s['accounts'][{aid!r}]['status'] == 'frozen'")],
                 [call("get_account_by_number", account_number=number),
                  call("freeze_account", account_id=aid, reason="suspicious activity")])

    # Cards by last four digits.
    for cust, last4 in [("CU-410", "6120"), ("CU-411", "9032"), ("CU-412", "2288")]:
        cid = next(c for c, x in INIT_CONFIG["cards"].items() if x["last4"] == last4)
        aid = INIT_CONFIG["cards"][cid]["account_id"]
        others = [c for c, x in INIT_CONFIG["cards"].items() if x["account_id"] == aid and c != cid]
        checks = [check(f"card {last4} blocked", f"s['cards'][{cid!r}]['status'] == 'blocked'")]
        checks += [check(f"card {INIT_CONFIG['cards'][o]['last4']} still active", f"s['cards'][{o!r}]['status'] == 'active'")
                   for o in others]
        book.add(f"{NAME[cust]} lost their card ending in {last4}. Block that card only.", checks,
                 _lookup(cust) + [call("list_cards", account_id=aid), call("block_card", card_id=cid, reason="lost")])
    for cust, last4, limit in [("CU-410", "4417", 2000), ("CU-412", "2288", 750), ("CU-411", "9032", 1000)]:
        cid = next(c for c, x in INIT_CONFIG["cards"].items() if x["last4"] == last4)
        aid = INIT_CONFIG["cards"][cid]["account_id"]
        book.add(f"Set the daily limit of {NAME[cust]}'s card ending in {last4} to {_usd(limit)}.",
                 [check(f"card {last4} limit {limit}", f"s['cards'][{cid!r}]['daily_limit'] == {limit}")],
                 _lookup(cust) + [call("list_cards", account_id=aid),
                                  call("update_card_limit", card_id=cid, daily_limit=limit)])

    # Amounts the agent has to work out.
    book.add("Kwame Asante is closing out his savings: move its entire balance into his checking account.",
             _moved("AC-5551", "AC-5550", 2200.0),
             _lookup("CU-413") + [call("transfer_funds", from_account_id="AC-5551", to_account_id="AC-5550",
                                       amount=2200.0, memo="close out savings")])
    book.add("Nadia Rahman wants to top up Ines Moreau's checking account (40-3355-02) so that it holds exactly "
             "$2,000, paying the difference from her own checking account.",
             _moved("AC-5521", "AC-5540", 124.75),
             _lookup("CU-410") + [call("get_account_by_number", account_number="40-3355-02"),
                                  call("transfer_funds", from_account_id="AC-5521", to_account_id="AC-5540",
                                       amount=124.75, memo="top-up")])
    for tid in ["TX-1", "TX-2"]:
        tx = INIT_CONFIG["transactions"][tid]
        receiver = ACCOUNTS[tx["to_account_id"]]["customer_id"]
        payer = ACCOUNTS[tx["from_account_id"]]["customer_id"]
        book.add(f"{NAME[receiver]} agreed to refund the '{tx['memo']}' payment they received from {NAME[payer]}: "
                 f"send the same amount back from the account that received it to the account it came from.",
                 _moved(tx["to_account_id"], tx["from_account_id"], tx["amount"]),
                 _lookup(receiver) + [call("list_transactions", account_id=tx["to_account_id"]),
                                      call("transfer_funds", from_account_id=tx["to_account_id"],
                                           to_account_id=tx["from_account_id"], amount=tx["amount"],
                                           memo=f"refund {tx['memo']}")])
