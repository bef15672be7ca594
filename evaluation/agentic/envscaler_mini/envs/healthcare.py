import copy
from typing import Optional


class ClinicScheduler:
    """Front desk of an outpatient clinic: patients, doctors with their open appointment slots,
    appointments, allergies and prescriptions. Slots are 'YYYY-MM-DD HH:MM' strings.

    Rules:
    - A new or moved appointment must use one of the doctor's open slots; the slot is then taken.
    - Cancelling or moving an appointment gives its old slot back to the doctor.
    - Only scheduled appointments can be cancelled or rescheduled; rescheduling keeps the doctor.
    - A drug may not be prescribed to a patient with a conflicting recorded allergy.
    - Refills must be between 0 and 6.
    """

    ALLERGY_CONFLICTS = {"penicillin": ["penicillin", "amoxicillin", "ampicillin"],
                         "sulfa": ["sulfamethoxazole"], "aspirin": ["aspirin"], "ibuprofen": ["ibuprofen"]}

    def __init__(self, init_config: Optional[dict] = None):
        self.patients = {}
        self.doctors = {}
        self.appointments = {}
        self.prescriptions = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _new_id(self, prefix, table):
        n = len(table) + 1
        while f"{prefix}{n}" in table:
            n += 1
        return f"{prefix}{n}"

    def _release(self, appointment):
        slots = self.doctors[appointment["doctor_id"]]["open_slots"]
        if appointment["slot"] not in slots:
            slots.append(appointment["slot"])
            slots.sort()

    def _scheduled(self, appointment_id):
        appointment = self.appointments.get(appointment_id)
        if appointment is None:
            return None, {"success": False, "error": f"Appointment '{appointment_id}' not found."}
        if appointment["status"] != "scheduled":
            return None, {"success": False, "error": f"Appointment is {appointment['status']}, not scheduled."}
        return appointment, None

    # -- query tools --

    def find_patient(self, name: str) -> dict:
        """Find patients by (part of) their name; returns id, date of birth and allergies.

        Args:
            name: Full or partial patient name.
        """
        needle = name.strip().lower()
        found = [{"patient_id": pid, **p} for pid, p in self.patients.items() if needle in p["name"].lower()]
        if not found:
            return {"success": False, "error": f"No patient matches '{name}'."}
        return {"success": True, "data": found}

    def search_doctors(self, specialty: Optional[str] = None, name: Optional[str] = None) -> dict:
        """Find doctors by specialty and/or (part of) their name; returns ids, names and specialties.

        Args:
            specialty: Optional specialty, e.g. 'cardiology'.
            name: Optional full or partial doctor name.
        """
        found = [{"doctor_id": did, "name": d["name"], "specialty": d["specialty"]} for did, d in self.doctors.items()
                 if (specialty is None or d["specialty"].lower() == specialty.strip().lower())
                 and (name is None or name.strip().lower() in d["name"].lower())]
        if not found:
            return {"success": False, "error": "No doctor matches."}
        return {"success": True, "data": found}

    def get_doctor_availability(self, doctor_id: str) -> dict:
        """List a doctor's open slots, earliest first.

        Args:
            doctor_id: Internal doctor id.
        """
        doctor = self.doctors.get(doctor_id)
        if doctor is None:
            return {"success": False, "error": f"Doctor id '{doctor_id}' not found."}
        return {"success": True, "data": {"doctor_id": doctor_id, "open_slots": sorted(doctor["open_slots"])}}

    def list_appointments(self, patient_id: str) -> dict:
        """List a patient's appointments (all statuses).

        Args:
            patient_id: Internal patient id.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"Patient id '{patient_id}' not found."}
        found = [{"appointment_id": aid, **a} for aid, a in self.appointments.items() if a["patient_id"] == patient_id]
        return {"success": True, "data": found}

    def list_prescriptions(self, patient_id: str) -> dict:
        """List a patient's prescriptions.

        Args:
            patient_id: Internal patient id.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"Patient id '{patient_id}' not found."}
        found = [{"prescription_id": rid, **r} for rid, r in self.prescriptions.items()
                 if r["patient_id"] == patient_id]
        return {"success": True, "data": found}

    # -- modification tools --

    def book_appointment(self, patient_id: str, doctor_id: str, slot: str, reason: str) -> dict:
        """Book a patient into one of a doctor's open slots.

        Args:
            patient_id: Internal patient id.
            doctor_id: Internal doctor id.
            slot: An open slot of that doctor, 'YYYY-MM-DD HH:MM'.
            reason: Reason for the visit.
        """
        if patient_id not in self.patients:
            return {"success": False, "error": f"Patient id '{patient_id}' not found."}
        doctor = self.doctors.get(doctor_id)
        if doctor is None:
            return {"success": False, "error": f"Doctor id '{doctor_id}' not found."}
        if slot not in doctor["open_slots"]:
            return {"success": False, "error": f"Slot '{slot}' is not open for {doctor['name']}."}
        for a in self.appointments.values():
            if a["patient_id"] == patient_id and a["slot"] == slot and a["status"] == "scheduled":
                return {"success": False, "error": "The patient already has an appointment at that time."}
        doctor["open_slots"].remove(slot)
        appointment_id = self._new_id("A-", self.appointments)
        self.appointments[appointment_id] = {"patient_id": patient_id, "doctor_id": doctor_id, "slot": slot,
                                             "status": "scheduled", "reason": reason}
        return {"success": True, "data": {"appointment_id": appointment_id, **self.appointments[appointment_id]}}

    def cancel_appointment(self, appointment_id: str) -> dict:
        """Cancel a scheduled appointment; its slot becomes open again.

        Args:
            appointment_id: Appointment id.
        """
        appointment, error = self._scheduled(appointment_id)
        if error:
            return error
        appointment["status"] = "cancelled"
        self._release(appointment)
        return {"success": True, "data": {"appointment_id": appointment_id, **appointment}}

    def reschedule_appointment(self, appointment_id: str, new_slot: str) -> dict:
        """Move a scheduled appointment to another open slot of the same doctor.

        Args:
            appointment_id: Appointment id.
            new_slot: An open slot of the same doctor, 'YYYY-MM-DD HH:MM'.
        """
        appointment, error = self._scheduled(appointment_id)
        if error:
            return error
        doctor = self.doctors[appointment["doctor_id"]]
        if new_slot not in doctor["open_slots"]:
            return {"success": False, "error": f"Slot '{new_slot}' is not open for {doctor['name']}."}
        doctor["open_slots"].remove(new_slot)
        self._release(appointment)
        appointment["slot"] = new_slot
        return {"success": True, "data": {"appointment_id": appointment_id, **appointment}}

    def add_allergy(self, patient_id: str, allergy: str) -> dict:
        """Record an allergy on a patient's file.

        Args:
            patient_id: Internal patient id.
            allergy: Allergen, e.g. 'penicillin'.
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"Patient id '{patient_id}' not found."}
        allergy = allergy.strip().lower()
        if allergy in patient["allergies"]:
            return {"success": False, "error": f"Allergy '{allergy}' is already recorded."}
        patient["allergies"].append(allergy)
        return {"success": True, "data": {"patient_id": patient_id, "allergies": patient["allergies"]}}

    def prescribe_medication(self, patient_id: str, drug: str, dose: str, refills: int) -> dict:
        """Create an active prescription, unless the patient has a conflicting allergy.

        Args:
            patient_id: Internal patient id.
            drug: Drug name, e.g. 'amoxicillin'.
            dose: Dose, e.g. '500 mg'.
            refills: Number of refills, 0 to 6.
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"Patient id '{patient_id}' not found."}
        drug = drug.strip().lower()
        for allergy in patient["allergies"]:
            if drug in self.ALLERGY_CONFLICTS.get(allergy, [allergy]):
                return {"success": False, "error": f"{patient['name']} is allergic to {allergy}; {drug} conflicts."}
        if not 0 <= refills <= 6:
            return {"success": False, "error": "Refills must be between 0 and 6."}
        rid = self._new_id("RX-", self.prescriptions)
        self.prescriptions[rid] = {"patient_id": patient_id, "drug": drug, "dose": dose, "refills_left": refills,
                                   "status": "active"}
        return {"success": True, "data": {"prescription_id": rid, **self.prescriptions[rid]}}

    def renew_prescription(self, prescription_id: str, refills: int) -> dict:
        """Set the remaining refills of an active prescription.

        Args:
            prescription_id: Prescription id.
            refills: New number of refills left, 0 to 6.
        """
        rx = self.prescriptions.get(prescription_id)
        if rx is None:
            return {"success": False, "error": f"Prescription '{prescription_id}' not found."}
        if rx["status"] != "active":
            return {"success": False, "error": f"Prescription is {rx['status']}."}
        if not 0 <= refills <= 6:
            return {"success": False, "error": "Refills must be between 0 and 6."}
        rx["refills_left"] = refills
        return {"success": True, "data": {"prescription_id": prescription_id, **rx}}
