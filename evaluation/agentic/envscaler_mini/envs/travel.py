import copy
import re
from typing import Optional


class TravelBookings:
    """Airline booking desk: travellers, scheduled flights with remaining seats, and bookings that
    travellers quote by their six-character confirmation code. Airports are IATA codes, dates
    'YYYY-MM-DD', departure times 'HH:MM'.

    Rules:
    - Booking takes a seat on the flight; cancelling gives it back. Sold-out flights cannot be booked.
    - Only confirmed bookings can be changed or cancelled.
    - A flight change keeps the route (same origin and destination) and clears the seat assignment.
    - Seats look like '12A' (row 1-40, letter A-F) and cannot be taken by another booking on the flight.
    - A booking may have 0 to 3 checked bags.
    """

    MAX_BAGS = 3

    def __init__(self, init_config: Optional[dict] = None):
        self.travelers = {}
        self.flights = {}
        self.bookings = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _confirmed(self, booking_id):
        booking = self.bookings.get(booking_id)
        if booking is None:
            return None, {"success": False, "error": f"Booking id '{booking_id}' not found."}
        if booking["status"] != "confirmed":
            return None, {"success": False, "error": f"Booking is {booking['status']}."}
        return booking, None

    # -- query tools --

    def find_traveler(self, name: str) -> dict:
        """Find travellers by (part of) their name.

        Args:
            name: Full or partial traveller name.
        """
        needle = name.strip().lower()
        found = [{"traveler_id": tid, **t} for tid, t in self.travelers.items() if needle in t["name"].lower()]
        if not found:
            return {"success": False, "error": f"No traveller matches '{name}'."}
        return {"success": True, "data": found}

    def search_flights(self, origin: str, destination: str, date: str) -> dict:
        """List the flights on a route and day with departure time, price and seats left.

        Args:
            origin: Origin airport code, e.g. 'LHR'.
            destination: Destination airport code, e.g. 'CPH'.
            date: Travel date, 'YYYY-MM-DD'.
        """
        found = [{"flight_id": fid, **f} for fid, f in self.flights.items()
                 if f["origin"] == origin.strip().upper() and f["destination"] == destination.strip().upper()
                 and f["date"] == date.strip()]
        found.sort(key=lambda f: f["departure"])
        return {"success": True, "data": found}

    def get_booking(self, confirmation_code: str) -> dict:
        """Look up a booking by its confirmation code (includes the flight details).

        Args:
            confirmation_code: Six-character code, e.g. 'QX7P2L'.
        """
        for bid, booking in self.bookings.items():
            if booking["confirmation_code"] == confirmation_code.strip().upper():
                return {"success": True, "data": {"booking_id": bid, **booking,
                                                  "flight": self.flights.get(booking["flight_id"])}}
        return {"success": False, "error": f"No booking with code '{confirmation_code}'."}

    def list_bookings(self, traveler_id: str) -> dict:
        """List a traveller's bookings with their flights.

        Args:
            traveler_id: Internal traveller id.
        """
        if traveler_id not in self.travelers:
            return {"success": False, "error": f"Traveller id '{traveler_id}' not found."}
        found = [{"booking_id": bid, **b, "flight": self.flights.get(b["flight_id"])}
                 for bid, b in self.bookings.items() if b["traveler_id"] == traveler_id]
        return {"success": True, "data": found}

    # -- modification tools --

    def book_flight(self, traveler_id: str, flight_id: str) -> dict:
        """Book a traveller on a flight (no seat, no bags); returns the booking and its code.

        Args:
            traveler_id: Internal traveller id.
            flight_id: Internal flight id (from search_flights).
        """
        if traveler_id not in self.travelers:
            return {"success": False, "error": f"Traveller id '{traveler_id}' not found."}
        flight = self.flights.get(flight_id)
        if flight is None:
            return {"success": False, "error": f"Flight id '{flight_id}' not found."}
        if flight["seats_left"] < 1:
            return {"success": False, "error": f"Flight {flight['flight_number']} on {flight['date']} is sold out."}
        flight["seats_left"] -= 1
        n = 3300 + len(self.bookings) + 1
        while f"BK-{n}" in self.bookings:
            n += 1
        code = f"N{n:05d}"
        self.bookings[f"BK-{n}"] = {"traveler_id": traveler_id, "flight_id": flight_id, "status": "confirmed",
                                    "seat": None, "bags": 0, "confirmation_code": code}
        return {"success": True, "data": {"booking_id": f"BK-{n}", **self.bookings[f"BK-{n}"]}}

    def cancel_booking(self, booking_id: str) -> dict:
        """Cancel a confirmed booking and release its seat.

        Args:
            booking_id: Internal booking id.
        """
        booking, error = self._confirmed(booking_id)
        if error:
            return error
        booking["status"] = "cancelled"
        self.flights[booking["flight_id"]]["seats_left"] += 1
        return {"success": True, "data": {"booking_id": booking_id, **booking}}

    def change_flight(self, booking_id: str, new_flight_id: str) -> dict:
        """Move a confirmed booking to another flight on the same route; the seat assignment is cleared.

        Args:
            booking_id: Internal booking id.
            new_flight_id: Internal id of the new flight.
        """
        booking, error = self._confirmed(booking_id)
        if error:
            return error
        new = self.flights.get(new_flight_id)
        if new is None:
            return {"success": False, "error": f"Flight id '{new_flight_id}' not found."}
        old = self.flights[booking["flight_id"]]
        if new_flight_id == booking["flight_id"]:
            return {"success": False, "error": "The booking is already on that flight."}
        if (new["origin"], new["destination"]) != (old["origin"], old["destination"]):
            return {"success": False, "error": f"New flight must fly {old['origin']}-{old['destination']}."}
        if new["seats_left"] < 1:
            return {"success": False, "error": f"Flight {new['flight_number']} on {new['date']} is sold out."}
        new["seats_left"] -= 1
        old["seats_left"] += 1
        booking["flight_id"] = new_flight_id
        booking["seat"] = None
        return {"success": True, "data": {"booking_id": booking_id, **booking}}

    def assign_seat(self, booking_id: str, seat: str) -> dict:
        """Assign a seat to a confirmed booking.

        Args:
            booking_id: Internal booking id.
            seat: Seat such as '12A' (row 1-40, letter A-F).
        """
        booking, error = self._confirmed(booking_id)
        if error:
            return error
        seat = seat.strip().upper()
        match = re.fullmatch(r"(\d{1,2})([A-F])", seat)
        if not match or not 1 <= int(match.group(1)) <= 40:
            return {"success": False, "error": f"'{seat}' is not a valid seat."}
        for bid, other in self.bookings.items():
            if (bid != booking_id and other["flight_id"] == booking["flight_id"] and other["seat"] == seat
                    and other["status"] == "confirmed"):
                return {"success": False, "error": f"Seat {seat} is already taken."}
        booking["seat"] = seat
        return {"success": True, "data": {"booking_id": booking_id, **booking}}

    def update_baggage(self, booking_id: str, bags: int) -> dict:
        """Set the number of checked bags on a confirmed booking.

        Args:
            booking_id: Internal booking id.
            bags: Number of checked bags, 0 to 3.
        """
        booking, error = self._confirmed(booking_id)
        if error:
            return error
        if not 0 <= bags <= self.MAX_BAGS:
            return {"success": False, "error": f"Bags must be between 0 and {self.MAX_BAGS}."}
        booking["bags"] = bags
        return {"success": True, "data": {"booking_id": booking_id, **booking}}
