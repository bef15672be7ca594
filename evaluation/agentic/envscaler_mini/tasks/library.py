"""Library: members by card number, books by title or author, then loans, holds and fines."""

from datetime import date, timedelta

from ._common import TaskBook, call, check, close

ENV_CLASS = "LibraryCirculation"

TODAY = "2025-04-07"

INIT_CONFIG = {
    "today": TODAY,
    "members": {
        "M-201": {"name": "Olivia Grant", "card_number": "LC-10045", "status": "active", "fines_due": 0.0, "max_loans": 3},
        "M-202": {"name": "Ethan Brooks", "card_number": "LC-10078", "status": "active", "fines_due": 6.5, "max_loans": 3},
        "M-203": {"name": "Sofia Rossi", "card_number": "LC-10112", "status": "active", "fines_due": 0.0, "max_loans": 5},
        "M-204": {"name": "Noah Fischer", "card_number": "LC-10150", "status": "suspended", "fines_due": 12.0, "max_loans": 3},
    },
    "books": {
        "B-01": {"title": "The Salt Road", "author": "Irene Marsh", "copies_total": 2, "copies_available": 1},
        "B-02": {"title": "Quiet Engines", "author": "Tomas Varga", "copies_total": 1, "copies_available": 0},
        "B-03": {"title": "A Field Guide to Moss", "author": "Lena Holt", "copies_total": 3, "copies_available": 3},
        "B-04": {"title": "Harbour Lights", "author": "Irene Marsh", "copies_total": 1, "copies_available": 1},
        "B-05": {"title": "Numbers Without Fear", "author": "Priya Anand", "copies_total": 2, "copies_available": 0},
        "B-06": {"title": "The Glass Orchard", "author": "Samuel Reyes", "copies_total": 1, "copies_available": 1},
    },
    "loans": {
        "L-501": {"member_id": "M-201", "book_id": "B-01", "due_date": "2025-04-15", "status": "active", "renewals": 0},
        "L-502": {"member_id": "M-202", "book_id": "B-02", "due_date": "2025-04-03", "status": "active", "renewals": 1},
        "L-503": {"member_id": "M-203", "book_id": "B-05", "due_date": "2025-04-20", "status": "active", "renewals": 0},
        "L-504": {"member_id": "M-201", "book_id": "B-05", "due_date": "2025-04-10", "status": "active", "renewals": 2},
        "L-505": {"member_id": "M-201", "book_id": "B-03", "due_date": "2025-03-20", "status": "returned", "renewals": 0},
    },
    "holds": {"H-71": {"member_id": "M-201", "book_id": "B-02", "status": "waiting"}},
}

MEMBERS = INIT_CONFIG["members"]
BOOKS = INIT_CONFIG["books"]
CARD = {m["name"]: (mid, m["card_number"]) for mid, m in MEMBERS.items()}
TITLE = {b["title"]: bid for bid, b in BOOKS.items()}
DUE = (date.fromisoformat(TODAY) + timedelta(days=21)).isoformat()


def _loan(mid: str, bid: str) -> dict:
    return check(f"{mid} borrowed {bid} due {DUE}",
                 f"any(l['member_id'] == {mid!r} and l['book_id'] == {bid!r} and l['status'] == 'active' and "
                 f"l['due_date'] == {DUE!r} for l in s['loans'].values())")


def _copies(bid: str, delta: int) -> dict:
    return check(f"{bid} has {BOOKS[bid]['copies_available'] + delta} copies available",
                 f"s['books'][{bid!r}]['copies_available'] == {BOOKS[bid]['copies_available'] + delta}")


def _fines(mid: str, value: float) -> dict:
    return check(f"{mid} owes {value:.2f}", close(f"s['members'][{mid!r}]['fines_due']", value))


def _returned(lid: str) -> dict:
    return check(f"{lid} returned", f"s['loans'][{lid!r}]['status'] == 'returned'")


def build(book: TaskBook) -> None:
    # Borrow a book given by title.
    for name, title in [("Olivia Grant", "A Field Guide to Moss"), ("Sofia Rossi", "Harbour Lights"),
                        ("Olivia Grant", "The Glass Orchard"), ("Sofia Rossi", "The Salt Road"),
                        ("Olivia Grant", "Harbour Lights")]:
        (mid, card), bid = CARD[name], TITLE[title]
        book.add(f"Member with card {card} wants to borrow '{title}'. Check it out to them.",
                 [_loan(mid, bid), _copies(bid, -1)],
                 [call("find_member", card_number=card), call("search_catalog", query=title),
                  call("checkout_book", member_id=mid, book_id=bid)])
    # Borrow a book given by author.
    for name, author in [("Sofia Rossi", "Samuel Reyes"), ("Olivia Grant", "Lena Holt")]:
        (mid, card), bid = CARD[name], next(b for b, x in BOOKS.items() if x["author"] == author)
        book.add(f"Member with card {card} wants to borrow the book by {author}. Check it out to them.",
                 [_loan(mid, bid)],
                 [call("find_member", card_number=card), call("search_catalog", query=author),
                  call("checkout_book", member_id=mid, book_id=bid)])
    book.add("Member with card LC-10112 wants to borrow every book we have by Irene Marsh.",
             [_loan("M-203", "B-01"), _loan("M-203", "B-04")],
             [call("find_member", card_number="LC-10112"), call("search_catalog", query="Irene Marsh"),
              call("checkout_book", member_id="M-203", book_id="B-01"),
              call("checkout_book", member_id="M-203", book_id="B-04")])

    # Fines in the way.
    for title in ["The Glass Orchard", "A Field Guide to Moss", "Harbour Lights"]:
        bid = TITLE[title]
        book.add(f"Ethan Brooks (card LC-10078) wants to borrow '{title}'. He is paying all the fines he owes "
                 f"right now; record the payment and check the book out.",
                 [_fines("M-202", 0.0), _loan("M-202", bid)],
                 [call("find_member", card_number="LC-10078"), call("pay_fine", member_id="M-202", amount=6.5),
                  call("search_catalog", query=title), call("checkout_book", member_id="M-202", book_id=bid)])
    book.add("Ethan Brooks (card LC-10078) pays 4.00 towards his fines. Record it.",
             [_fines("M-202", 2.5)],
             [call("find_member", card_number="LC-10078"), call("pay_fine", member_id="M-202", amount=4.0)])
    book.add("Noah Fischer (card LC-10150) is paying everything he owes. Record the payment and lift his "
             "suspension.",
             [_fines("M-204", 0.0), check("M-204 active", "s['members']['M-204']['status'] == 'active'")],
             [call("find_member", card_number="LC-10150"), call("pay_fine", member_id="M-204", amount=12.0),
              call("reactivate_member", member_id="M-204")])
    book.add("Noah Fischer (card LC-10150) wants to borrow 'Harbour Lights'. He will pay all his fines now; "
             "do whatever else is needed so he can borrow it.",
             [_fines("M-204", 0.0), check("M-204 active", "s['members']['M-204']['status'] == 'active'"),
              _loan("M-204", "B-04")],
             [call("find_member", card_number="LC-10150"), call("pay_fine", member_id="M-204", amount=12.0),
              call("reactivate_member", member_id="M-204"), call("search_catalog", query="Harbour Lights"),
              call("checkout_book", member_id="M-204", book_id="B-04")])

    # Returns (with late fees).
    for name, lid in [("Ethan Brooks", "L-502"), ("Olivia Grant", "L-501"), ("Olivia Grant", "L-504")]:
        (mid, card), loan = CARD[name], INIT_CONFIG["loans"][lid]
        late = max(0, (date.fromisoformat(TODAY) - date.fromisoformat(loan["due_date"])).days)
        title = BOOKS[loan["book_id"]]["title"]
        book.add(f"Member with card {card} is returning '{title}'. Check it in.",
                 [_returned(lid), _copies(loan["book_id"], +1), _fines(mid, MEMBERS[mid]["fines_due"] + 0.25 * late)],
                 [call("find_member", card_number=card), call("list_member_loans", member_id=mid),
                  call("return_book", loan_id=lid)])
    book.add("Member with card LC-10045 is returning all the books she currently has. Check them all in.",
             [_returned("L-501"), _returned("L-504")],
             [call("find_member", card_number="LC-10045"), call("list_member_loans", member_id="M-201"),
              call("return_book", loan_id="L-501"), call("return_book", loan_id="L-504")])
    book.add("Ethan Brooks (card LC-10078) returns 'Quiet Engines' and wants to borrow 'Harbour Lights'. He "
             "pays whatever he owes after the return.",
             [_returned("L-502"), _fines("M-202", 0.0), _loan("M-202", "B-04")],
             [call("find_member", card_number="LC-10078"), call("list_member_loans", member_id="M-202"),
              call("return_book", loan_id="L-502"), call("pay_fine", member_id="M-202", amount=7.5),
              call("search_catalog", query="Harbour Lights"), call("checkout_book", member_id="M-202", book_id="B-04")])

    # Renewals.
    for name, lid in [("Olivia Grant", "L-501"), ("Sofia Rossi", "L-503")]:
        (mid, card), loan = CARD[name], INIT_CONFIG["loans"][lid]
        new_due = (date.fromisoformat(loan["due_date"]) + timedelta(days=14)).isoformat()
        book.add(f"Member with card {card} wants to renew '{BOOKS[loan['book_id']]['title']}'.",
                 [check(f"{lid} due {new_due}", f"s['loans'][{lid!r}]['due_date'] == {new_due!r}")],
                 [call("find_member", card_number=card), call("list_member_loans", member_id=mid),
                  call("renew_loan", loan_id=lid)])
    book.add("Member with card LC-10045 wants to renew 'Numbers Without Fear'. If the loan cannot be renewed, "
             "check the book in instead.",
             [_returned("L-504"), check("L-504 due date unchanged", "s['loans']['L-504']['due_date'] == '2025-04-10'")],
             [call("find_member", card_number="LC-10045"), call("list_member_loans", member_id="M-201"),
              call("return_book", loan_id="L-504")])

    # Borrow if available, otherwise hold.
    for name, title in [("Sofia Rossi", "Quiet Engines"), ("Ethan Brooks", "Numbers Without Fear"),
                        ("Sofia Rossi", "A Field Guide to Moss")]:
        (mid, card), bid = CARD[name], TITLE[title]
        if BOOKS[bid]["copies_available"]:
            checks = [_loan(mid, bid)]
            last = call("checkout_book", member_id=mid, book_id=bid)
        else:
            checks = [check(f"{mid} waits for {bid}", f"any(h['member_id'] == {mid!r} and h['book_id'] == {bid!r} "
                                                      f"and h['status'] == 'waiting' for h in s['holds'].values())")]
            last = call("place_hold", member_id=mid, book_id=bid)
        book.add(f"Member with card {card} wants '{title}': check it out if a copy is available, otherwise "
                 f"put them on the waiting list.", checks,
                 [call("find_member", card_number=card), call("search_catalog", query=title), last])
