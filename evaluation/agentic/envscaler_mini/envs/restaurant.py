import copy
import re
from typing import Optional


class RestaurantDesk:
    """Host stand of a restaurant: tables, reservations (found by guest name) and the menu. Dates are
    'YYYY-MM-DD', times 'HH:MM'; every reservation holds its table for two hours.

    Rules:
    - A booked reservation's party must fit the table's seats (party size 1 or more).
    - Two booked reservations on the same table and day must start at least two hours apart.
    - Only booked reservations can be changed or cancelled.
    - Menu prices must be positive.
    """

    SLOT_MINUTES = 120

    def __init__(self, init_config: Optional[dict] = None):
        self.tables = {}
        self.reservations = {}
        self.menu = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _bad_when(self, date, time):
        """An error reply when date or time is malformed, else None."""
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            return {"success": False, "error": f"Date '{date}' must look like 'YYYY-MM-DD'."}
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", time):
            return {"success": False, "error": f"Time '{time}' must look like 'HH:MM' (24-hour)."}
        return None

    def _minutes(self, time):
        hours, minutes = time.split(":")
        return int(hours) * 60 + int(minutes)

    def _table_free(self, table_id, date, time, ignore=None):
        start = self._minutes(time)
        for rid, r in self.reservations.items():
            if (rid != ignore and r["table_id"] == table_id and r["date"] == date and r["status"] == "booked"
                    and abs(self._minutes(r["time"]) - start) < self.SLOT_MINUTES):
                return False
        return True

    def _booked(self, reservation_id):
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return None, {"success": False, "error": f"Reservation '{reservation_id}' not found."}
        if reservation["status"] != "booked":
            return None, {"success": False, "error": f"Reservation is {reservation['status']}."}
        return reservation, None

    def _menu_item(self, item_id):
        item = self.menu.get(item_id)
        if item is None:
            return None, {"success": False, "error": f"Menu item '{item_id}' not found."}
        return item, None

    # -- query tools --

    def find_reservations(self, guest_name: str, date: Optional[str] = None) -> dict:
        """Find reservations by (part of) the guest's name, optionally on one day.

        Args:
            guest_name: Full or partial guest name.
            date: Optional day, 'YYYY-MM-DD'.
        """
        needle = guest_name.strip().lower()
        found = [{"reservation_id": rid, **r} for rid, r in self.reservations.items()
                 if needle in r["guest_name"].lower() and (date is None or r["date"] == date)]
        if not found:
            return {"success": False, "error": f"No reservation for '{guest_name}'."}
        return {"success": True, "data": found}

    def list_available_tables(self, date: str, time: str, party_size: int) -> dict:
        """List the tables that seat a party and are free for two hours from a given time.

        Args:
            date: Day, 'YYYY-MM-DD'.
            time: Start time, 'HH:MM'.
            party_size: Number of guests.
        """
        error = self._bad_when(date, time)
        if error:
            return error
        found = [{"table_id": tid, **t} for tid, t in self.tables.items()
                 if t["seats"] >= party_size and self._table_free(tid, date, time)]
        found.sort(key=lambda t: t["seats"])
        return {"success": True, "data": found}

    def search_menu(self, query: Optional[str] = None, category: Optional[str] = None) -> dict:
        """Search menu items by (part of) their name and/or category (starter, main, dessert).

        Args:
            query: Optional part of the dish name.
            category: Optional category.
        """
        found = [{"item_id": iid, **m} for iid, m in self.menu.items()
                 if (query is None or query.strip().lower() in m["name"].lower())
                 and (category is None or m["category"] == category.strip().lower())]
        if not found:
            return {"success": False, "error": "No menu item matches."}
        return {"success": True, "data": found}

    # -- modification tools --

    def create_reservation(self, guest_name: str, phone: str, date: str, time: str, party_size: int,
                           table_id: str) -> dict:
        """Book a table for a party.

        Args:
            guest_name: Guest's full name.
            phone: Contact phone number.
            date: Day, 'YYYY-MM-DD'.
            time: Start time, 'HH:MM'.
            party_size: Number of guests.
            table_id: Table id (see list_available_tables).
        """
        error = self._bad_when(date, time)
        if error:
            return error
        table = self.tables.get(table_id)
        if table is None:
            return {"success": False, "error": f"Table '{table_id}' not found."}
        if not 1 <= party_size <= table["seats"]:
            return {"success": False, "error": f"Table {table_id} seats {table['seats']}; "
                                               f"party of {party_size} does not fit."}
        if not self._table_free(table_id, date, time):
            return {"success": False, "error": f"Table {table_id} is taken around {time} on {date}."}
        n = 200 + len(self.reservations) + 1
        while f"RS-{n}" in self.reservations:
            n += 1
        self.reservations[f"RS-{n}"] = {"guest_name": guest_name, "phone": phone, "date": date, "time": time,
                                        "party_size": party_size, "table_id": table_id, "status": "booked", "notes": ""}
        return {"success": True, "data": {"reservation_id": f"RS-{n}", **self.reservations[f"RS-{n}"]}}

    def update_party_size(self, reservation_id: str, party_size: int) -> dict:
        """Change the number of guests of a booked reservation (it must still fit the table).

        Args:
            reservation_id: Reservation id.
            party_size: New number of guests.
        """
        reservation, error = self._booked(reservation_id)
        if error:
            return error
        seats = self.tables[reservation["table_id"]]["seats"]
        if not 1 <= party_size <= seats:
            return {"success": False, "error": f"Table {reservation['table_id']} seats {seats}; move the party first."}
        reservation["party_size"] = party_size
        return {"success": True, "data": {"reservation_id": reservation_id, **reservation}}

    def change_table(self, reservation_id: str, table_id: str) -> dict:
        """Move a booked reservation to another table at the same day and time.

        Args:
            reservation_id: Reservation id.
            table_id: Id of the new table.
        """
        reservation, error = self._booked(reservation_id)
        if error:
            return error
        table = self.tables.get(table_id)
        if table is None:
            return {"success": False, "error": f"Table '{table_id}' not found."}
        if reservation["party_size"] > table["seats"]:
            return {"success": False, "error": f"Table {table_id} seats only {table['seats']}."}
        if not self._table_free(table_id, reservation["date"], reservation["time"], ignore=reservation_id):
            return {"success": False, "error": f"Table {table_id} is taken at that time."}
        reservation["table_id"] = table_id
        return {"success": True, "data": {"reservation_id": reservation_id, **reservation}}

    def reschedule_reservation(self, reservation_id: str, date: str, time: str) -> dict:
        """Move a booked reservation to another day and/or time, keeping its table.

        Args:
            reservation_id: Reservation id.
            date: New day, 'YYYY-MM-DD'.
            time: New start time, 'HH:MM'.
        """
        reservation, error = self._booked(reservation_id)
        if error:
            return error
        error = self._bad_when(date, time)
        if error:
            return error
        if not self._table_free(reservation["table_id"], date, time, ignore=reservation_id):
            return {"success": False, "error": f"Table {reservation['table_id']} is taken around {time} on {date}."}
        reservation["date"], reservation["time"] = date, time
        return {"success": True, "data": {"reservation_id": reservation_id, **reservation}}

    def cancel_reservation(self, reservation_id: str) -> dict:
        """Cancel a booked reservation.

        Args:
            reservation_id: Reservation id.
        """
        reservation, error = self._booked(reservation_id)
        if error:
            return error
        reservation["status"] = "cancelled"
        return {"success": True, "data": {"reservation_id": reservation_id, "status": "cancelled"}}

    def add_note(self, reservation_id: str, note: str) -> dict:
        """Append a note for the staff (allergies, occasions) to a booked reservation.

        Args:
            reservation_id: Reservation id.
            note: Text of the note.
        """
        reservation, error = self._booked(reservation_id)
        if error:
            return error
        reservation["notes"] = (reservation["notes"] + "; " if reservation["notes"] else "") + note.strip()
        return {"success": True, "data": {"reservation_id": reservation_id, "notes": reservation["notes"]}}

    def set_item_availability(self, item_id: str, available: bool) -> dict:
        """Mark a menu item as available or sold out.

        Args:
            item_id: Menu item id.
            available: True when it can be ordered, False when sold out.
        """
        item, error = self._menu_item(item_id)
        if error:
            return error
        item["available"] = bool(available)
        return {"success": True, "data": {"item_id": item_id, **item}}

    def update_menu_price(self, item_id: str, price: float) -> dict:
        """Change the price of a menu item.

        Args:
            item_id: Menu item id.
            price: New price, positive.
        """
        item, error = self._menu_item(item_id)
        if error:
            return error
        if price <= 0:
            return {"success": False, "error": "Price must be positive."}
        item["price"] = price
        return {"success": True, "data": {"item_id": item_id, **item}}
