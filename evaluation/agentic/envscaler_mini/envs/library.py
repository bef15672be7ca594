import copy
from datetime import date, timedelta
from typing import Optional


class LibraryCirculation:
    """Circulation desk of a public library: members (known by library card number), the catalogue
    with available copies, loans and holds. `today` is the desk's current date ('YYYY-MM-DD').

    Rules:
    - Borrowing needs an active member with fines_due of at most 5.00, fewer active loans than their
      max_loans, and an available copy. A loan is due 21 days after today.
    - A loan can be renewed at most twice, by 14 days each, unless it is overdue or another member
      is waiting for the book.
    - Returning an overdue loan adds a late fee of 0.25 per day to the member's fines.
    - A hold can only be placed when no copy is available, by an active member not already holding it.
    - A suspended member can be reactivated only when fines_due is zero.
    """

    LOAN_DAYS = 21
    RENEW_DAYS = 14
    MAX_RENEWALS = 2
    FINE_LIMIT = 5.0
    LATE_FEE_PER_DAY = 0.25

    def __init__(self, init_config: Optional[dict] = None):
        self.today = "2025-04-07"
        self.members = {}
        self.books = {}
        self.loans = {}
        self.holds = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _new_id(self, prefix, table, start):
        n = start + len(table) + 1
        while f"{prefix}{n}" in table:
            n += 1
        return f"{prefix}{n}"

    def _member(self, member_id):
        member = self.members.get(member_id)
        if member is None:
            return None, {"success": False, "error": f"Member id '{member_id}' not found."}
        return member, None

    def _active_loan(self, loan_id):
        loan = self.loans.get(loan_id)
        if loan is None:
            return None, {"success": False, "error": f"Loan '{loan_id}' not found."}
        if loan["status"] != "active":
            return None, {"success": False, "error": f"Loan is already {loan['status']}."}
        return loan, None

    # -- query tools --

    def search_catalog(self, query: str) -> dict:
        """Search books by title or author (case-insensitive substring); shows available copies.

        Args:
            query: Part of a title or an author's name.
        """
        needle = query.strip().lower()
        found = [{"book_id": bid, **b} for bid, b in self.books.items()
                 if needle in b["title"].lower() or needle in b["author"].lower()]
        if not found:
            return {"success": False, "error": f"Nothing in the catalogue matches '{query}'."}
        return {"success": True, "data": found}

    def find_member(self, card_number: str) -> dict:
        """Look up a member by library card number (status, fines and loan limit included).

        Args:
            card_number: Library card number, e.g. 'LC-10045'.
        """
        for mid, member in self.members.items():
            if member["card_number"] == card_number.strip().upper():
                return {"success": True, "data": {"member_id": mid, **member}}
        return {"success": False, "error": f"No member with card '{card_number}'."}

    def list_member_loans(self, member_id: str, include_returned: bool = False) -> dict:
        """List a member's loans with book titles and due dates.

        Args:
            member_id: Internal member id.
            include_returned: Also list loans already returned.
        """
        if member_id not in self.members:
            return {"success": False, "error": f"Member id '{member_id}' not found."}
        found = [{"loan_id": lid, **loan, "title": self.books[loan["book_id"]]["title"]}
                 for lid, loan in self.loans.items()
                 if loan["member_id"] == member_id and (include_returned or loan["status"] == "active")]
        return {"success": True, "data": found}

    # -- modification tools --

    def checkout_book(self, member_id: str, book_id: str) -> dict:
        """Lend an available copy of a book to a member.

        Args:
            member_id: Internal member id.
            book_id: Internal book id.
        """
        member, error = self._member(member_id)
        if error:
            return error
        book = self.books.get(book_id)
        if book is None:
            return {"success": False, "error": f"Book id '{book_id}' not found."}
        if member["status"] != "active":
            return {"success": False, "error": f"Member is {member['status']}."}
        if member["fines_due"] > self.FINE_LIMIT:
            return {"success": False, "error": f"Fines due {member['fines_due']:.2f} exceed {self.FINE_LIMIT:.2f}."}
        active = sum(1 for loan in self.loans.values() if loan["member_id"] == member_id and loan["status"] == "active")
        if active >= member["max_loans"]:
            return {"success": False, "error": f"Member already has {active} loans (max {member['max_loans']})."}
        if book["copies_available"] < 1:
            return {"success": False, "error": f"No copy of '{book['title']}' is available; place a hold instead."}
        book["copies_available"] -= 1
        due = (date.fromisoformat(self.today) + timedelta(days=self.LOAN_DAYS)).isoformat()
        loan_id = self._new_id("L-", self.loans, 500)
        self.loans[loan_id] = {"member_id": member_id, "book_id": book_id, "due_date": due, "status": "active",
                               "renewals": 0}
        for hold in self.holds.values():
            if hold["member_id"] == member_id and hold["book_id"] == book_id and hold["status"] == "waiting":
                hold["status"] = "fulfilled"
        return {"success": True, "data": {"loan_id": loan_id, **self.loans[loan_id]}}

    def return_book(self, loan_id: str) -> dict:
        """Check a borrowed book back in; overdue loans add a late fee to the member's fines.

        Args:
            loan_id: Loan id.
        """
        loan, error = self._active_loan(loan_id)
        if error:
            return error
        late_days = (date.fromisoformat(self.today) - date.fromisoformat(loan["due_date"])).days
        fee = round(max(0, late_days) * self.LATE_FEE_PER_DAY, 2)
        member = self.members[loan["member_id"]]
        member["fines_due"] = round(member["fines_due"] + fee, 2)
        loan["status"] = "returned"
        self.books[loan["book_id"]]["copies_available"] += 1
        return {"success": True, "data": {"loan_id": loan_id, "late_fee": fee, "fines_due": member["fines_due"]}}

    def renew_loan(self, loan_id: str) -> dict:
        """Extend an active loan's due date by 14 days.

        Args:
            loan_id: Loan id.
        """
        loan, error = self._active_loan(loan_id)
        if error:
            return error
        if loan["due_date"] < self.today:
            return {"success": False, "error": "The loan is overdue; return it instead."}
        if loan["renewals"] >= self.MAX_RENEWALS:
            return {"success": False, "error": f"The loan was already renewed {self.MAX_RENEWALS} times."}
        for hold in self.holds.values():
            if (hold["book_id"] == loan["book_id"] and hold["status"] == "waiting"
                    and hold["member_id"] != loan["member_id"]):
                return {"success": False, "error": "Another member is waiting for this book."}
        loan["due_date"] = (date.fromisoformat(loan["due_date"]) + timedelta(days=self.RENEW_DAYS)).isoformat()
        loan["renewals"] += 1
        return {"success": True, "data": {"loan_id": loan_id, **loan}}

    def place_hold(self, member_id: str, book_id: str) -> dict:
        """Put a member in the waiting list of a book that has no available copy.

        Args:
            member_id: Internal member id.
            book_id: Internal book id.
        """
        member, error = self._member(member_id)
        if error:
            return error
        book = self.books.get(book_id)
        if book is None:
            return {"success": False, "error": f"Book id '{book_id}' not found."}
        if member["status"] != "active":
            return {"success": False, "error": f"Member is {member['status']}."}
        if book["copies_available"] > 0:
            return {"success": False, "error": "A copy is available; check it out instead."}
        for hold in self.holds.values():
            if hold["member_id"] == member_id and hold["book_id"] == book_id and hold["status"] == "waiting":
                return {"success": False, "error": "The member already holds this book."}
        hold_id = self._new_id("H-", self.holds, 70)
        self.holds[hold_id] = {"member_id": member_id, "book_id": book_id, "status": "waiting"}
        return {"success": True, "data": {"hold_id": hold_id, **self.holds[hold_id]}}

    def pay_fine(self, member_id: str, amount: float) -> dict:
        """Record a payment towards a member's fines.

        Args:
            member_id: Internal member id.
            amount: Amount paid, positive and at most the fines due.
        """
        member, error = self._member(member_id)
        if error:
            return error
        if not 0 < amount <= member["fines_due"] + 1e-9:
            return {"success": False, "error": f"Amount must be positive and at most {member['fines_due']:.2f}."}
        member["fines_due"] = round(member["fines_due"] - amount, 2)
        return {"success": True, "data": {"member_id": member_id, "fines_due": member["fines_due"]}}

    def reactivate_member(self, member_id: str) -> dict:
        """Lift a member's suspension once all fines are paid.

        Args:
            member_id: Internal member id.
        """
        member, error = self._member(member_id)
        if error:
            return error
        if member["status"] != "suspended":
            return {"success": False, "error": f"Member is {member['status']}, not suspended."}
        if member["fines_due"] > 0:
            return {"success": False, "error": f"Fines of {member['fines_due']:.2f} must be paid first."}
        member["status"] = "active"
        return {"success": True, "data": {"member_id": member_id, "status": "active"}}
